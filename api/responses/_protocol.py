"""The OpenAI Responses API wire format (``POST /v1/responses``), defined once, here.

Requests: only what Duet acts on is modelled; unknown fields are ignored. Input items and tools
stay plain dicts: :mod:`duet.api.responses._reader` checks and converts them in one pass, with
error params like ``input[2].content[0].type``.

Responses: the ``response`` object and its output items, as the ``openai`` SDK's
``openai.types.responses`` types read them (its stream accumulation is the judge). The stream's
events are written by :mod:`duet.api.responses._writers` from the same item models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from duet.api._wire import MAX_TOKENS_LIMIT, JSONSchema, NullableBool

HOSTED_TOOL_TYPES = frozenset({
    "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11", "file_search",
    "code_interpreter", "image_generation", "computer", "computer_use_preview", "mcp", "local_shell", "shell",
    "apply_patch", "tool_search",
})
"""Tools OpenAI runs itself. The answer model cannot be handed them: they are dropped (a service tool
configured in the pipeline, say one named ``web_search``, stands in for one)."""


MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class LenientModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextFormat(BaseModel):
    """``text.format``: plain text, a JSON object, or JSON that follows a schema."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: Optional[str] = Field(None, pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    schema_: Optional[JSONSchema] = Field(None, alias="schema")
    description: Optional[str] = None
    strict: Optional[bool] = None

    def response_format(self) -> dict[str, Any]:
        """The Chat Completions ``response_format`` the answer model gets."""
        if self.type != "json_schema":
            return {"type": self.type}
        schema: dict[str, Any] = {"name": self.name or "response", "schema": self.schema_ or {}}
        if self.description is not None:
            schema["description"] = self.description
        if self.strict is not None:
            schema["strict"] = self.strict
        return {"type": "json_schema", "json_schema": schema}


class TextConfig(LenientModel):
    format: Optional[TextFormat] = None
    verbosity: Optional[str] = None


class NamedToolChoice(LenientModel):
    """``{"type": "function" | "custom", "name": ...}``, ``{"type": "allowed_tools", ...}`` or a hosted tool's type."""

    type: str = Field(min_length=1, max_length=64)
    name: Optional[str] = None
    namespace: Optional[str] = None
    mode: Optional[Literal["auto", "required"]] = None
    tools: Optional[list[dict[str, Any]]] = None


class ResponsesRequest(LenientModel):
    model: str = Field(max_length=256)
    input: Union[str, list[dict[str, Any]]]
    instructions: Optional[str] = None
    stream: NullableBool = False
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: Optional[bool] = None
    max_output_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, ge=0, le=1)
    text: Optional[TextConfig] = None
    reasoning: Optional[dict[str, Any]] = None  # its ``effort`` drives the reasoner (responses/_reader.py)
    prompt_cache_key: Optional[str] = Field(None, max_length=1024)  # passed on to the answer model (prompt caches)
    metadata: Optional[dict[MetadataKey, MetadataValue]] = Field(None, max_length=16)  # as OpenAI bounds it
    user: Optional[str] = None
    store: Optional[bool] = None  # default: true
    include: Optional[list[str]] = None
    client_metadata: Optional[dict[str, Any]] = None
    previous_response_id: Optional[str] = Field(None, min_length=1, max_length=256)

    @property
    def stored(self) -> bool:
        return self.store is not False


# ---- The response object -----------------------------------------------------------------------

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]


class SummaryText(BaseModel):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningItem(BaseModel):
    id: str
    type: Literal["reasoning"] = "reasoning"
    summary: list[SummaryText]
    status: Optional[ItemStatus] = None


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class MessageItem(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: list[OutputText]


class _CallItem(BaseModel):
    """A call of a client tool (a namespaced tool is named with its ``namespace``)."""

    id: str
    status: ItemStatus
    call_id: str
    name: str
    namespace: Optional[str] = None


class FunctionCallItem(_CallItem):
    type: Literal["function_call"] = "function_call"
    arguments: str


class CustomToolCallItem(_CallItem):
    type: Literal["custom_tool_call"] = "custom_tool_call"
    input: str


OutputItem = Union[ReasoningItem, MessageItem, FunctionCallItem, CustomToolCallItem]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int, cached_tokens: int = 0) -> "ResponseUsage":
        return cls(input_tokens=prompt_tokens, output_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens,
                   input_tokens_details=InputTokensDetails(cached_tokens=cached_tokens),
                   output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning_tokens))


class ResponseError(BaseModel):
    code: str
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class Response(BaseModel):
    """The ``response`` object: the body of a non-streamed answer, of ``GET /v1/responses/{id}`` and
    of the stream's lifecycle events."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    background: bool = False
    error: Optional[ResponseError] = None
    incomplete_details: Optional[IncompleteDetails] = None
    instructions: Optional[str] = None
    max_output_tokens: Optional[int] = None
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: Optional[str] = None
    reasoning: dict[str, Any] = Field(default_factory=lambda: {"effort": None, "summary": None})
    store: bool = True
    temperature: Optional[float] = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: Union[str, dict[str, Any]] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_p: Optional[float] = None
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: Optional[ResponseUsage] = None
    user: Optional[str] = None
    metadata: dict[str, str] = Field(default_factory=dict)
