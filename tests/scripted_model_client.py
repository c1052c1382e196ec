"""A scripted AutoGen ``ChatCompletionClient`` for unit tests of the agents' turns (no sockets).

Each model call takes the next :class:`ScriptedTurn`: ``create_stream`` yields its pieces (plain
text, :class:`~duet.agents.upstream.ReasoningText`, inline ``<think>`` text: whatever a real client would)
and then its ``CreateResult``. Every call is recorded with its arguments, and whether the caller
closed the stream before its end::

    client = ScriptedModelClient(ScriptedTurn([ReasoningText("plan"), "Hi"], result=text_result("Hi")))
    ...  # give it to an agent, run the agent
    client.calls[0].messages  # what the agent sent
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Literal, Mapping, Optional, Sequence

from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    ModelCapabilities,  # type: ignore[attr-defined]
    ModelInfo,
    RequestUsage,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel

from duet.agents.upstream import ANSWER_MODEL_INFO


def text_result(text: str, *, thought: str | None = None, usage: tuple[int, int] = (10, 2), finish_reason: str = "stop") -> CreateResult:
    """The final result of a call that answered with text."""
    return CreateResult(finish_reason=finish_reason, content=text, usage=RequestUsage(prompt_tokens=usage[0], completion_tokens=usage[1]),  # type: ignore[arg-type]
                        cached=False, thought=thought)


def calls_result(*calls: tuple[str, str], thought: str | None = None, usage: tuple[int, int] = (10, 2)) -> CreateResult:
    """The final result of a call that made tool calls, each given as (name, JSON arguments)."""
    return CreateResult(finish_reason="function_calls",
                        content=[FunctionCall(id=f"up{index}", name=name, arguments=arguments) for index, (name, arguments) in enumerate(calls)],
                        usage=RequestUsage(prompt_tokens=usage[0], completion_tokens=usage[1]), cached=False, thought=thought)


@dataclass
class ScriptedTurn:
    """What the scripted model answers to one call."""

    pieces: Sequence[str]
    result: CreateResult


@dataclass
class RecordedCall:
    """One call the client received."""

    messages: list[LLMMessage]
    tools: list[ToolSchema]
    tool_choice: Any
    extra_create_args: dict[str, Any]
    pieces_taken: int = 0  # pieces the caller read
    closed_early: bool = False  # the caller closed the stream before its CreateResult
    finished: bool = field(default=False, repr=False)


class ScriptedModelClient(ChatCompletionClient):
    """Answers each call with the next scripted turn; fails a call that has no turn left."""

    def __init__(self, *turns: ScriptedTurn, model_info: ModelInfo | None = None) -> None:
        self._turns = list(turns)
        self._model_info: ModelInfo = model_info or ANSWER_MODEL_INFO
        self.calls: list[RecordedCall] = []
        self._usage = RequestUsage(prompt_tokens=0, completion_tokens=0)

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: Optional[bool | type[BaseModel]] = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: Optional[CancellationToken] = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        call = RecordedCall(
            messages=list(messages),
            tools=[tool.schema if isinstance(tool, Tool) else tool for tool in tools],
            tool_choice=tool_choice.name if isinstance(tool_choice, Tool) else tool_choice,
            extra_create_args=dict(extra_create_args),
        )
        self.calls.append(call)
        if not self._turns:
            raise AssertionError(f"model call {len(self.calls)} was not scripted")
        turn = self._turns.pop(0)
        try:
            for piece in turn.pieces:
                call.pieces_taken += 1
                yield piece
            self._usage = RequestUsage(prompt_tokens=self._usage.prompt_tokens + turn.result.usage.prompt_tokens,
                                       completion_tokens=self._usage.completion_tokens + turn.result.usage.completion_tokens)
            call.finished = True
            yield turn.result
        finally:
            call.closed_early = not call.finished

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: Optional[bool | type[BaseModel]] = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: Optional[CancellationToken] = None,
    ) -> CreateResult:
        result: CreateResult | None = None
        async for item in self.create_stream(messages, tools=tools, tool_choice=tool_choice, json_output=json_output,
                                             extra_create_args=extra_create_args, cancellation_token=cancellation_token):
            if isinstance(item, CreateResult):
                result = item
        assert result is not None
        return result

    @property
    def unused_turns(self) -> int:
        return len(self._turns)

    async def close(self) -> None:
        pass

    def actual_usage(self) -> RequestUsage:
        return self._usage

    def total_usage(self) -> RequestUsage:
        return self._usage

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []) -> int:
        return sum(len(str(message.content)) for message in messages) // 4

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []) -> int:
        return 128_000 - self.count_tokens(messages, tools=tools)

    @property
    def capabilities(self) -> ModelCapabilities:  # type: ignore[override]
        return self._model_info  # type: ignore[return-value]

    @property
    def model_info(self) -> ModelInfo:
        return self._model_info
