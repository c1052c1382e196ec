"""The OpenAI wire format, defined once, here: what Duet reads and what it writes.

Requests: only what Duet acts on is modelled; unknown fields are ignored, as OpenAI-compatible
servers must. Messages stay plain dicts: ``duet.agents.conversation_from_openai`` validates and
converts them in one pass (with error paths like ``messages[2].content``).

Responses: every shape Duet writes (``chat.completion``, ``chat.completion.chunk``, the model list,
the error body). A model's ``model_dump(mode="json")`` is its exact JSON: optional fields OpenAI
leaves out are left out when ``None`` (:data:`Omitted`); fields OpenAI writes as ``null`` stay.
The streamed path writes chunks with a byte encoder (:mod:`duet.api.chunks`) for speed; a unit test
holds it equal to these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, ClassVar, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from duet.workbenches import ContentCache, content_key, json_schema_problem, parameters_problem

INT64_MAX = 2**63 - 1
"""OpenAI's integer fields are int64 (``seed``): a larger number is refused here, not by the answer model."""
MAX_TOKENS_LIMIT = 2**31 - 1
"""OpenAI's token counts (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``) are int32: an
upstream refuses more, after the reasoner ran; Duet refuses it first. Anthropic's ``max_tokens`` too."""
MAX_STOP_SEQUENCES = 4
"""OpenAI's ``stop`` holds at most 4 sequences (Anthropic's ``stop_sequences`` become it)."""


def _null_is_false(value: Any) -> Any:
    return False if value is None else value


NullableBool = Annotated[bool, BeforeValidator(_null_is_false)]
"""A flag OpenAI lets clients send as ``null``, meaning false (``"stream": null``)."""


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionDefinition(_Lenient):
    name: str = Field(min_length=1)
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, parameters: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        """A function's arguments are one JSON object, described by a valid JSON Schema whose
        references resolve: what an upstream would refuse after the reasoner ran is refused here."""
        if parameters is not None and (problem := parameters_problem(parameters)) is not None:
            raise ValueError(problem)
        return parameters


class ToolDefinition(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Lenient):
    include_usage: NullableBool = False


def _valid_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    if (problem := json_schema_problem(schema)) is not None:
        raise ValueError(problem)
    return schema


JSONSchema = Annotated[dict[str, Any], AfterValidator(_valid_json_schema)]
"""A response format's schema: refused here when an upstream would refuse it (:func:`~duet.workbenches.json_schema_problem`)."""


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


class KnownTools(list):  # type: ignore[type-arg]
    """A request's tools (or legacy functions) as validated, and the :func:`~duet.workbenches.content_key`
    of the list as received (the proxy tools are looked up by it: :func:`~duet.workbenches.proxy_tools_from_openai`).
    Shared by the requests that send the same list: nobody changes it."""

    __slots__ = ("content_key",)

    def __init__(self, validated: list[Any], key: bytes) -> None:
        super().__init__(validated)
        self.content_key = key


MAX_KNOWN_TOOL_LISTS = 256


def validated_once() -> Callable[[Any, ValidatorFunctionWrapHandler], Any]:
    """A wrap validator for one field's tool list, validated once per content: a client sends the same
    tools with every request, and checking 128 tool schemas costs about as much as parsing them. Each
    field has its cache (a list valid as two fields' types is validated as each)."""
    known: ContentCache[KnownTools] = ContentCache(MAX_KNOWN_TOOL_LISTS, 8 * 1024 * 1024)

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        key = content_key(value) if type(value) is list else None
        if key is None:
            return handler(value)
        # Validated from a private copy (the request's body is not kept); an invalid list raises, and is never kept.
        return known.get_or_make(value, lambda copy: KnownTools(handler(copy), key), key)

    return validate


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
)


class ChatCompletionRequest(_Lenient):
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

    _tools_once = field_validator("tools", mode="wrap")(validated_once())
    _functions_once = field_validator("functions", mode="wrap")(validated_once())

    @property
    def legacy_functions(self) -> bool:
        """Dify's "Function Call" mode: ``functions`` in, ``function_call`` out."""
        return self.functions is not None and self.tools is None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[str] = None


class ErrorBody(BaseModel):
    """``{"error": {"message", "type", "param", "code"}}`` — the only error shape Duet answers with."""

    error: ErrorDetail


# ---- Responses -------------------------------------------------------------------------------


class _Omitted:
    """Marks an optional response field that is left out of the JSON while it is ``None``."""


Omitted = _Omitted()
"""``Annotated[Optional[X], Omitted]``: absent from the JSON when ``None`` (OpenAI omits it, not ``null``)."""


class _Response(BaseModel):
    """A response object: its ``model_dump(mode="json")`` is exactly what goes on the wire."""

    _omitted: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._omitted = frozenset(name for name, info in cls.model_fields.items() if Omitted in info.metadata)

    # No return annotation: pydantic would take it as the JSON schema of the response (the API docs).
    @model_serializer(mode="wrap")
    def _leave_out_omitted(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        data: dict[str, Any] = handler(self)
        for name in self._omitted:
            if data.get(name, 0) is None:
                del data[name]
        return data


WireFinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]
"""Why a choice ended; ``function_call`` answers a legacy ``functions`` request."""


class CompletionTokensDetails(_Response):
    reasoning_tokens: int


class CompletionUsage(_Response):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: Annotated[Optional[CompletionTokensDetails], Omitted] = None

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0) -> "CompletionUsage":
        """The usage object; ``completion_tokens_details`` only when some completion tokens were reasoning."""
        details = CompletionTokensDetails(reasoning_tokens=reasoning_tokens) if reasoning_tokens else None
        return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens,
                   completion_tokens_details=details)


class CalledFunction(_Response):
    """The function a tool call (or a legacy ``function_call``) names, with its arguments as a JSON string."""

    name: str
    arguments: str


class ChatCompletionMessageToolCall(_Response):
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatCompletionMessage(_Response):
    role: Literal["assistant"] = "assistant"
    content: Optional[str]  # null when the message is only tool calls
    reasoning_content: Annotated[Optional[str], Omitted] = None
    tool_calls: Annotated[Optional[list[ChatCompletionMessageToolCall]], Omitted] = None
    function_call: Annotated[Optional[CalledFunction], Omitted] = None


class Choice(_Response):
    index: int = 0
    message: ChatCompletionMessage
    logprobs: None = None
    finish_reason: WireFinishReason


class ChatCompletion(_Response):
    """The non-streamed response."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage


class ChoiceDeltaFunctionCall(_Response):
    """A piece of a call: the first carries the name (and empty arguments), the next the arguments."""

    name: Annotated[Optional[str], Omitted] = None
    arguments: str


class ChoiceDeltaToolCall(_Response):
    index: int
    id: Annotated[Optional[str], Omitted] = None
    type: Annotated[Optional[Literal["function"]], Omitted] = None
    function: ChoiceDeltaFunctionCall


class ChoiceDelta(_Response):
    role: Annotated[Optional[Literal["assistant"]], Omitted] = None
    content: Annotated[Optional[str], Omitted] = None
    reasoning_content: Annotated[Optional[str], Omitted] = None
    tool_calls: Annotated[Optional[list[ChoiceDeltaToolCall]], Omitted] = None
    function_call: Annotated[Optional[ChoiceDeltaFunctionCall], Omitted] = None


class ChunkChoice(_Response):
    index: int = 0
    delta: ChoiceDelta
    logprobs: None = None
    finish_reason: Optional[WireFinishReason] = None


class ChatCompletionChunk(_Response):
    """One streamed event. The ``stream_options.include_usage`` chunk has ``choices: []`` and ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Annotated[Optional[CompletionUsage], Omitted] = None


class Model(_Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "duet"


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[Model]
