"""What the protocols' wire formats share: OpenAI's integer bounds, lenient request models, JSON
schema fields, tool lists validated once per content, response models whose optional fields are left
out, the OpenAI error body, the model list, and the finish reasons the renderer speaks.

A response model's ``model_dump(mode="json")`` is its exact JSON: optional fields a protocol leaves
out are left out when ``None`` (:data:`Omitted`); fields it writes as ``null`` stay.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, ClassVar, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
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


class LenientModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionDefinition(LenientModel):
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


def _valid_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    if (problem := json_schema_problem(schema)) is not None:
        raise ValueError(problem)
    return schema


JSONSchema = Annotated[dict[str, Any], AfterValidator(_valid_json_schema)]
"""A response format's schema: refused here when an upstream would refuse it (:func:`~duet.workbenches.json_schema_problem`)."""


class KnownTools(list):
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


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[str] = None


class ErrorBody(BaseModel):
    """``{"error": {"message", "type", "param", "code"}}`` — the only error shape Duet answers with."""

    error: ErrorDetail


class _Omitted:
    """Marks an optional response field that is left out of the JSON while it is ``None``."""


Omitted = _Omitted()
"""``Annotated[Optional[X], Omitted]``: absent from the JSON when ``None`` (OpenAI omits it, not ``null``)."""


class ResponseModel(BaseModel):
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


class Model(ResponseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "duet"


class ModelList(ResponseModel):
    object: Literal["list"] = "list"
    data: list[Model]
