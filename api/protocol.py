"""The OpenAI wire format Duet reads: defined once, here.

Only what Duet acts on is modelled; unknown fields are ignored, as OpenAI-compatible servers must.
Messages stay plain dicts: ``agents.conversation_from_openai`` validates and converts them in one
pass (with error paths like ``messages[2].content``).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionDefinition(_Lenient):
    name: str = Field(min_length=1)
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None


class ToolDefinition(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Lenient):
    include_usage: bool = False


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
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    tools: Optional[list[ToolDefinition]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: Optional[bool] = None
    functions: Optional[list[FunctionDefinition]] = None
    function_call: Optional[Union[Literal["none", "auto"], NamedFunction]] = None
    n: Optional[int] = Field(None, ge=1, le=1, description="Only one choice is produced.")
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, ge=0, le=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    stop: Optional[Union[str, list[str]]] = None
    presence_penalty: Optional[float] = Field(None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)
    seed: Optional[int] = None
    response_format: Optional[dict[str, Any]] = None
    user: Optional[str] = None
    logit_bias: Optional[dict[str, float]] = None

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
