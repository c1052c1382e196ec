"""The Anthropic Messages wire format, defined once, here: what Duet reads and what it writes.

Requests: only what Duet acts on is modelled; unknown fields (``context_management``,
``output_config``, ``defer_loading``, …) are ignored, as Claude Code's defaults need; ``cache_control``
marks are read beside the conversation (:mod:`duet.api.messages._cache_marks`). Messages stay plain dicts: :mod:`duet.api.messages._reader` validates and converts them
in one pass, with error paths like ``messages.2.content.0.type``.

Responses: every shape Duet writes (the ``message``, its content blocks, the error body, the
``count_tokens`` answer). The streamed path writes its events as bytes (:mod:`duet.api.messages._stream`)
for speed; a unit test holds the message the Anthropic SDK assembles from them equal to these models'.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from duet.workbenches import parameters_problem

from duet.api._wire import MAX_STOP_SEQUENCES, MAX_TOKENS_LIMIT, NullableBool, Omitted, ResponseModel, validated_once


class LenientModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ToolDefinition(LenientModel):
    """A client tool (``type`` absent or ``custom``). Anthropic's own tool types (``web_search_…``,
    ``bash_…``, ``text_editor_…``) carry no ``input_schema``: the reader drops them."""

    name: str = Field(min_length=1, max_length=256)
    type: Optional[str] = None
    description: Optional[str] = None
    input_schema: Optional[dict[str, Any]] = None
    cache_control: Optional[dict[str, Any]] = None  # a prompt-cache mark: api/messages/_cache_marks.py

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, schema: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        """Checked as a function's parameters are (:func:`~duet.workbenches.parameters_problem`)."""
        if schema is not None and (problem := parameters_problem(schema)) is not None:
            raise ValueError(problem)
        return schema


class AutoToolChoice(LenientModel):
    type: Literal["auto"]
    disable_parallel_tool_use: Optional[bool] = None


class AnyToolChoice(LenientModel):
    type: Literal["any"]
    disable_parallel_tool_use: Optional[bool] = None


class NamedToolChoice(LenientModel):
    type: Literal["tool"]
    name: str = Field(min_length=1)
    disable_parallel_tool_use: Optional[bool] = None


class NoToolChoice(LenientModel):
    type: Literal["none"]


ToolChoice = Union[AutoToolChoice, AnyToolChoice, NamedToolChoice, NoToolChoice]


class Metadata(LenientModel):
    user_id: Optional[str] = Field(None, max_length=256)


class MessagesRequest(LenientModel):
    """``POST /v1/messages`` (and, without ``max_tokens`` and ``stream``, ``/v1/messages/count_tokens``).

    ``thinking`` drives the reasoner: ``disabled`` skips it, ``enabled`` bounds it by ``budget_tokens``,
    ``adaptive`` leaves it to the pipeline. ``top_k`` is accepted and not passed on
    (OpenAI-compatible upstreams have no such parameter)."""

    model: str = Field(min_length=1, max_length=256)
    max_tokens: int = Field(ge=1, le=MAX_TOKENS_LIMIT)
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: Optional[Union[str, list[dict[str, Any]]]] = None
    stream: NullableBool = False
    tools: Optional[list[ToolDefinition]] = None
    tool_choice: Optional[ToolChoice] = Field(None, discriminator="type")
    # The answer model gets them as OpenAI's ``stop``, which takes at most 4: more is refused, not cut.
    stop_sequences: Optional[list[str]] = Field(None, max_length=MAX_STOP_SEQUENCES)
    temperature: Optional[float] = Field(None, ge=0, le=1)
    top_p: Optional[float] = Field(None, ge=0, le=1)
    top_k: Optional[int] = Field(None, ge=0)
    thinking: Optional[dict[str, Any]] = None
    metadata: Optional[Metadata] = None

    _tools_once = field_validator("tools", mode="wrap")(validated_once())


class CountTokensRequest(MessagesRequest):
    """``POST /v1/messages/count_tokens``: the same request, without ``max_tokens``."""

    max_tokens: int = Field(1, ge=1, le=MAX_TOKENS_LIMIT)


# ---- Responses -------------------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class ThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = Union[ThinkingBlock, TextBlock, ToolUseBlock]


class OutputTokensDetails(BaseModel):
    thinking_tokens: int


class MessageUsage(ResponseModel):
    """Both stages summed; the reasoner's output tokens are the ``thinking_tokens`` of ``output_tokens``."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: Annotated[Optional[int], Omitted] = None
    output_tokens_details: Annotated[Optional[OutputTokensDetails], Omitted] = None

    @classmethod
    def of(cls, input_tokens: int, output_tokens: int, thinking_tokens: int, cached_tokens: int = 0) -> "MessageUsage":
        """Anthropic counts cache reads apart from ``input_tokens``: the upstreams' cached prompt tokens
        move from one to the other."""
        details = OutputTokensDetails(thinking_tokens=thinking_tokens) if thinking_tokens else None
        return cls(input_tokens=input_tokens - cached_tokens, output_tokens=output_tokens, output_tokens_details=details,
                   cache_read_input_tokens=cached_tokens or None)


class Message(BaseModel):
    """The non-streamed response; ``message_start`` carries it with no content yet."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: Optional[StopReason]
    stop_sequence: Optional[str] = None
    usage: MessageUsage


class CountTokensResponse(BaseModel):
    input_tokens: int


ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
]


class ErrorDetail(BaseModel):
    type: ErrorType
    message: str


class ErrorBody(BaseModel):
    """``{"type": "error", "error": {"type", "message"}}``: the body of an error status, and the
    data of a mid-stream ``event: error``."""

    type: Literal["error"] = "error"
    error: ErrorDetail


STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""Duet's finish reasons on this wire. OpenAI-compatible upstreams report a stop sequence as an
ordinary ``stop``, so ``stop_sequence`` is never told apart (it reads ``end_turn``)."""


def tool_input_json(arguments: str) -> str:
    """A call's arguments as the JSON object a ``tool_use`` block's ``input`` must be: as the model
    wrote them when they are one, else ``{}`` (the client's own validation then tells the model)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return "{}"
    return arguments if isinstance(value, dict) else "{}"


def thinking_signature(message_id: str) -> str:
    """The ``signature`` of a thinking block. Anthropic's clients require one and send it back with
    the block; Duet drops thinking from history before any model sees it, so it verifies nothing:
    the signature only names the message the thinking came from."""
    return base64.b64encode(f"duet:{message_id}".encode()).decode()
