"""The OpenAI wire format, defined once, here: what Duet reads and what it writes.

Requests: only what Duet acts on is modelled; unknown fields are ignored, as OpenAI-compatible
servers must. Messages stay plain dicts: ``duet.agents.conversation_from_openai`` validates and
converts them in one pass (with error paths like ``messages[2].content``).

Responses: every shape Duet writes (``chat.completion``, ``chat.completion.chunk``, the model list,
the error body). A model's ``model_dump(mode="json")`` is its exact JSON: optional fields OpenAI
leaves out are left out when ``None`` (:data:`Omitted`); fields OpenAI writes as ``null`` stay.
The streamed path writes chunks with a byte encoder (:mod:`duet.api.chat._stream`) for speed; a unit test
holds it equal to these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from duet.agents import ReasoningEffort
from duet.api._wire import (
    FunctionDefinition,
    INT64_MAX,
    JSONSchema,
    LenientModel,
    MAX_STOP_SEQUENCES,
    MAX_TOKENS_LIMIT,
    NullableBool,
    Omitted,
    ResponseModel,
    WireFinishReason,
    validated_once,
)


class ToolDefinition(LenientModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(LenientModel):
    name: str


class NamedToolChoice(LenientModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(LenientModel):
    include_usage: NullableBool = False


class JSONSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: Optional[str] = None
    schema_: Optional[JSONSchema] = Field(None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(BaseModel):
    """Checked here; :meth:`as_sent` gives the answer model what the client sent (extra keys kept)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JSONSchemaFormat] = None

    @model_validator(mode="after")
    def _schema_given(self) -> "ResponseFormat":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs a json_schema object")
        return self

    def as_sent(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_unset=True)


TokenId = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,10}$")]
Bias = Annotated[float, Field(ge=-100, le=100)]


# Request fields passed to the answer model as they came.
ANSWER_MODEL_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "response_format",
    "user",
    "logit_bias",
    "prompt_cache_key",
)


class ChatCompletionRequest(LenientModel):
    model: str = Field(max_length=256)
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: NullableBool = False
    stream_options: Optional[StreamOptions] = None
    tools: Optional[list[ToolDefinition]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: Optional[bool] = None
    functions: Optional[list[FunctionDefinition]] = None
    function_call: Optional[Union[Literal["none", "auto"], NamedFunction]] = None
    n: Optional[int] = Field(None, ge=1, le=1, description="Only one choice is produced.")
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, ge=0, le=1)
    max_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    stop: Optional[Union[str, Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES)]]] = None
    presence_penalty: Optional[float] = Field(None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)
    seed: Optional[int] = Field(None, ge=-INT64_MAX - 1, le=INT64_MAX)
    response_format: Optional[ResponseFormat] = None
    user: Optional[str] = None
    logit_bias: Optional[dict[TokenId, Bias]] = None
    prompt_cache_key: Optional[str] = Field(None, max_length=1024, description="Passed on to the answer model (prompt caches).")
    reasoning_effort: Optional[ReasoningEffort] = Field(None, description="How much the reasoner thinks; none/minimal: not at all.")

    _tools_once = field_validator("tools", mode="wrap")(validated_once())
    _functions_once = field_validator("functions", mode="wrap")(validated_once())

    @property
    def legacy_functions(self) -> bool:
        """Dify's "Function Call" mode: ``functions`` in, ``function_call`` out."""
        return self.functions is not None and self.tools is None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionTokensDetails(ResponseModel):
    reasoning_tokens: int


class PromptTokensDetails(ResponseModel):
    cached_tokens: int


class CompletionUsage(ResponseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: Annotated[Optional[PromptTokensDetails], Omitted] = None
    completion_tokens_details: Annotated[Optional[CompletionTokensDetails], Omitted] = None

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0, cached_tokens: int = 0) -> "CompletionUsage":
        """The usage object; ``completion_tokens_details`` only when some completion tokens were reasoning,
        ``prompt_tokens_details`` only when the upstreams read some prompt tokens from their caches."""
        details = CompletionTokensDetails(reasoning_tokens=reasoning_tokens) if reasoning_tokens else None
        cached = PromptTokensDetails(cached_tokens=cached_tokens) if cached_tokens else None
        return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens,
                   prompt_tokens_details=cached, completion_tokens_details=details)


class CalledFunction(ResponseModel):
    """The function a tool call (or a legacy ``function_call``) names, with its arguments as a JSON string."""

    name: str
    arguments: str


class ChatCompletionMessageToolCall(ResponseModel):
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatCompletionMessage(ResponseModel):
    role: Literal["assistant"] = "assistant"
    content: Optional[str]  # null when the message is only tool calls
    reasoning_content: Annotated[Optional[str], Omitted] = None
    tool_calls: Annotated[Optional[list[ChatCompletionMessageToolCall]], Omitted] = None
    function_call: Annotated[Optional[CalledFunction], Omitted] = None


class Choice(ResponseModel):
    index: int = 0
    message: ChatCompletionMessage
    logprobs: None = None
    finish_reason: WireFinishReason


class ChatCompletion(ResponseModel):
    """The non-streamed response."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage


class ChoiceDeltaFunctionCall(ResponseModel):
    """A piece of a call: the first carries the name (and empty arguments), the next the arguments."""

    name: Annotated[Optional[str], Omitted] = None
    arguments: str


class ChoiceDeltaToolCall(ResponseModel):
    index: int
    id: Annotated[Optional[str], Omitted] = None
    type: Annotated[Optional[Literal["function"]], Omitted] = None
    function: ChoiceDeltaFunctionCall


class ChoiceDelta(ResponseModel):
    role: Annotated[Optional[Literal["assistant"]], Omitted] = None
    content: Annotated[Optional[str], Omitted] = None
    reasoning_content: Annotated[Optional[str], Omitted] = None
    tool_calls: Annotated[Optional[list[ChoiceDeltaToolCall]], Omitted] = None
    function_call: Annotated[Optional[ChoiceDeltaFunctionCall], Omitted] = None


class ChunkChoice(ResponseModel):
    index: int = 0
    delta: ChoiceDelta
    logprobs: None = None
    finish_reason: Optional[WireFinishReason] = None


class ChatCompletionChunk(ResponseModel):
    """One streamed event. The ``stream_options.include_usage`` chunk has ``choices: []`` and ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Annotated[Optional[CompletionUsage], Omitted] = None


