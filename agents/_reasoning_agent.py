"""The reasoning half of the duet."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncGenerator, Iterator, Literal, Mapping, Sequence, Union

from autogen_agentchat.base import Response
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import CancellationToken, Component
from autogen_core.models import ChatCompletionClient, CreateResult, LLMMessage, RequestUsage, SystemMessage
from autogen_core.tools import BaseTool, ToolSchema, Workbench
from pydantic import Field
from typing_extensions import Self

from duet.workbenches import derived_from

from duet.agents._base import DuetAgent, DuetAgentConfig, DuetAgentOptions, agent_arguments, estimate_tokens
from duet.agents._cancellation import child_token, unlink_child
from duet.agents._conversation import as_transcript, ends_with_tool_results
from duet.agents._events import DuetEvent, ReasoningDelta, Usage
from duet.agents._grounding import retrieved_context
from duet.agents._messages import read_grounding, read_task, reasoning_reply, restores_reasoning
from duet.agents.upstream import streaming_create_args
from duet.agents._run import DuetRun
from duet.agents._text_parts import TextParts
from duet.agents._thinking import ReasoningSplitter

DEFAULT_REASONING_PROMPT = (
    "You are the reasoning half of a two-model assistant. Think the conversation through: what the "
    "user asks in their latest message, which facts and steps the reply needs, and what could go "
    "wrong. A second model writes the reply from your reasoning; do not write the reply yourself."
)


def describe_tools(tools: Sequence[ToolSchema]) -> str:
    """The tools the answer model can call, as text the reasoning model can plan with (each client
    tool's line is written once, however many requests send it: :func:`~duet.workbenches.derived_from`)."""
    if not tools:
        return ""
    lines = [
        "\n\nThe second model can call these tools (you cannot): plan which ones it should call, and with what arguments."
    ]
    lines += [derived_from(tool, "reasoner_line", _tool_line) for tool in tools]
    return "\n".join(lines)


def _tool_line(tool: Mapping[str, Any]) -> str:
    line = f"- {tool['name']}"
    if tool.get("description"):
        line += f": {tool['description']}"
    if tool.get("parameters"):
        line += f"\n  parameters: {json.dumps(tool['parameters'], ensure_ascii=False, separators=(',', ':'))}"
    return line


ReasonOnToolResults = Union[bool, Literal["auto"]]

DEFAULT_REASON_ON_TOOL_RESULTS: ReasonOnToolResults = "auto"
"""A round that only brings tool results goes straight to the answer agent (one model call fewer per
tool round) when the reasoning it continues is restored; when that reasoning is lost (call ids Duet
never issued, a stored round that expired or whose store is down) the reasoner thinks again, so the
answer model never answers a continued round without reasoning."""

DEFAULT_STOP_AFTER_THINKING = True
"""The draft answer a reasoning model writes after its thinking is never read: close the call instead."""

DEFAULT_MAX_REASONING_CHARS = 40_000
"""About 10k tokens: more than reasoning models spend on all but the hardest questions, and the
reasoning is pasted into the answer model's prompt, which must still fit a 16k-32k context window."""

DEFAULT_MAX_REASONING_SECONDS = 300.0
"""Five minutes of thinking before the answer starts is the most a person waiting should get."""


class ReasoningAgentOptions(DuetAgentOptions):
    """How the reasoning agent works: the fields its config and the YAML ``reasoner:`` section share."""

    reason_on_tool_results: ReasonOnToolResults = Field(
        DEFAULT_REASON_ON_TOOL_RESULTS,
        description="Think again on rounds that only bring tool results: true, false, or 'auto' (only when the "
        "reasoning of the round they continue cannot be restored).",
    )
    stop_after_thinking: bool = Field(
        DEFAULT_STOP_AFTER_THINKING, description="Close the reasoning call when the thinking ends."
    )
    # 0 means no limit (a dumped component drops None values, which would bring the defaults back).
    max_reasoning_chars: int = Field(
        DEFAULT_MAX_REASONING_CHARS,
        ge=0,
        description="Longest reasoning, in characters: then the call is closed, a note ends the reasoning and the "
        "answer model goes on with the reasoning so far. 0: no limit.",
    )
    max_reasoning_seconds: float = Field(
        DEFAULT_MAX_REASONING_SECONDS,
        ge=0,
        description="Longest reasoning call, in seconds (from the request to the model on); then as for "
        "max_reasoning_chars. 0: no limit.",
    )


class ReasoningAgentConfig(ReasoningAgentOptions, DuetAgentConfig):
    """The reasoning agent as a component: the shared agent fields, then its options."""


class ReasoningAgent(DuetAgent, Component[ReasoningAgentConfig]):
    """Thinks about the conversation before the answer agent replies, and streams its thinking.

    The model gets the conversation as a plain transcript (tool calls and results written out, which
    reasoning models without tool support accept) and a description of the workbench's tools. It
    never calls tools. Its reply is a ``TextMessage`` marked as reasoning (see
    :mod:`duet.agents._messages`), which the answer agent reads.

    Args:
        reason_on_tool_results: think again on rounds that only bring tool results: ``True``
            always, ``False`` never (those rounds go straight to the answer agent), ``"auto"`` only
            when the task carries no restored reasoning for the round it continues.
        stop_after_thinking: for models that separate thinking from answering (``reasoning_content``
            or ``<think>`` tags), close the call once the thinking ends instead of waiting for a
            draft answer nobody reads. The usage of such a call is then estimated.
        max_reasoning_chars, max_reasoning_seconds: when the reasoning reaches this length, or the
            call has run this long, the call is closed, a short note ends the reasoning stream, and
            the answer agent goes on with the reasoning so far (0: no limit).

    Example (no model is called before the agent's first turn):

    >>> from duet.agents import OpenAICompatibleClient
    >>> reasoner = ReasoningAgent("reasoner", OpenAICompatibleClient("deepseek-r1", "http://localhost:11434/v1"))
    >>> reasoner.dump_component().config["max_reasoning_chars"]
    40000
    """

    component_config_schema = ReasoningAgentConfig
    component_provider_override = "duet.agents.ReasoningAgent"
    _model_client: ChatCompletionClient  # always given (only the grounding agent has none)

    def __init__(
        self,
        name: str,
        model_client: ChatCompletionClient,
        *,
        description: str = "Thinks the conversation through before the answer agent replies.",
        system_message: str | None = None,
        workbench: Workbench | None = None,
        tools: Sequence[BaseTool[Any, Any]] | None = None,
        reason_on_tool_results: ReasonOnToolResults = DEFAULT_REASON_ON_TOOL_RESULTS,
        stop_after_thinking: bool = DEFAULT_STOP_AFTER_THINKING,
        max_reasoning_chars: int = DEFAULT_MAX_REASONING_CHARS,
        max_reasoning_seconds: float = DEFAULT_MAX_REASONING_SECONDS,
    ) -> None:
        super().__init__(
            name, description, model_client, system_message=system_message, workbench=workbench, tools=tools
        )
        self._reason_on_tool_results = reason_on_tool_results
        self._stop_after_thinking = stop_after_thinking
        self._max_reasoning_chars = max_reasoning_chars
        self._max_reasoning_seconds = max_reasoning_seconds

    def _prompt(self, conversation: Sequence[LLMMessage], tools: Sequence[ToolSchema], grounding: str = "") -> list[LLMMessage]:
        turns: list[LLMMessage] = []
        client_instructions: list[str] = []
        for message in as_transcript(conversation):  # one pass: the client's system messages join the reasoner's
            if isinstance(message, SystemMessage):
                client_instructions.append(message.content)
            else:
                turns.append(message)
        instructions = [self._system_message or DEFAULT_REASONING_PROMPT]
        if client_instructions:
            instructions.append("The assistant's instructions:\n" + "\n\n".join(client_instructions))
        if grounding:
            instructions.append(retrieved_context(grounding))
        turns.insert(0, SystemMessage(content="\n\n".join(instructions) + describe_tools(tools)))
        return turns

    async def _turn(
        self, messages: Sequence[BaseChatMessage], run: DuetRun | None, cancellation_token: CancellationToken
    ) -> AsyncGenerator[DuetEvent | Response, None]:
        conversation, _ = read_task(messages)
        if ends_with_tool_results(conversation) and not self._rethinks(messages):
            yield Response(chat_message=reasoning_reply(self.name, ""))
            return
        prompt = await self._prompt_of(conversation, messages, run)
        if cancellation_token.is_cancelled():  # the client already left: start no model call
            raise asyncio.CancelledError()
        call_token, timer = self._call_token(cancellation_token)
        max_chars = self._max_reasoning_chars or None
        splitter = ReasoningSplitter()
        parts = TextParts()
        size = 0
        result: CreateResult | None = None
        stopped = False
        limit_note = ""
        stream = self._model_stream(
            "reasoner", run, prompt, extra_create_args=streaming_create_args(self._model_client, {}), cancellation_token=call_token
        )
        try:
            async for piece in stream:
                if isinstance(piece, CreateResult):
                    result = piece
                    break
                reasoning, content = splitter.feed(piece)
                piece = None  # split: not kept while the next one is awaited
                if content and self._stop_after_thinking and splitter.reasoning_finished:
                    content = ""  # the thinking is complete and a draft answer begins: stop here
                    stopped = True
                text = reasoning + content
                if text:
                    size += len(text)
                    if max_chars is not None and size >= max_chars:
                        text = text[: len(text) - (size - max_chars)]
                        limit_note = f"[reasoning cut off at {max_chars} characters]"
                        stopped = True
                if text:
                    parts.append(text)
                    yield ReasoningDelta(text=text, source=self.name)
                if stopped:
                    break
        except asyncio.CancelledError:
            if not self._out_of_time(cancellation_token, call_token):
                raise  # the request was cancelled: not a limit
            limit_note = f"[reasoning stopped after {self._max_reasoning_seconds:g} s]"
        finally:
            if timer is not None:
                timer.cancel()
                unlink_child(cancellation_token, call_token)
            await stream.aclose()
        for event in self._end(prompt, splitter, parts, limit_note, result):
            yield event

    async def _prompt_of(self, conversation: list[LLMMessage], messages: Sequence[BaseChatMessage], run: DuetRun | None) -> list[LLMMessage]:
        """The prompt of the turn: the conversation, the tools the answer agent will have, the retrieved context."""
        workbench = self._workbench_for(run)
        tools = await workbench.list_tools() if workbench is not None else []
        return self._prompt(conversation, tools, read_grounding(messages))

    def _call_token(self, cancellation_token: CancellationToken) -> tuple[CancellationToken, asyncio.TimerHandle | None]:
        """The model call's token: the request's, or, with ``max_reasoning_seconds``, a token of its own,
        cancelled by the request's or when the time is up (the timer, to cancel when the call ends)."""
        if not self._max_reasoning_seconds:
            return cancellation_token, None
        call_token = child_token(cancellation_token)
        return call_token, asyncio.get_running_loop().call_later(self._max_reasoning_seconds, call_token.cancel)

    @staticmethod
    def _out_of_time(cancellation_token: CancellationToken, call_token: CancellationToken) -> bool:
        """A cancellation of the model call that is the time limit's, not the request's."""
        current = asyncio.current_task()
        return not (cancellation_token.is_cancelled() or not call_token.is_cancelled() or (current and current.cancelling()))

    def _end(self, prompt: list[LLMMessage], splitter: ReasoningSplitter, parts: TextParts, limit_note: str,
             result: CreateResult | None) -> Iterator[DuetEvent | Response]:
        """Why the reasoning ends early (the client sees it; the answer agent goes on with it), or what
        the splitter still held; then the usage, and the reply."""
        if limit_note:
            limit_note = ("\n\n" if parts else "") + limit_note
            parts.append(limit_note)
            yield ReasoningDelta(text=limit_note, source=self.name)
        else:
            reasoning, content = splitter.flush()
            if reasoning or content:
                parts.append(reasoning + content)
                yield ReasoningDelta(text=reasoning + content, source=self.name)
        if result is not None:
            usage = result.usage
        else:
            usage = RequestUsage(prompt_tokens=estimate_tokens(prompt), completion_tokens=len(parts))
        # All the reasoner writes is reasoning to the client (a draft answer after it is never shown).
        yield Usage(source=self.name, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                    reasoning_tokens=usage.completion_tokens)
        yield Response(chat_message=reasoning_reply(self.name, parts.join().strip(), usage))

    def _rethinks(self, messages: Sequence[BaseChatMessage]) -> bool:
        """Whether a round that only brings tool results is thought through again."""
        if self._reason_on_tool_results == "auto":
            return not restores_reasoning(messages)
        return bool(self._reason_on_tool_results)

    def _to_config(self) -> ReasoningAgentConfig:
        return ReasoningAgentConfig(
            **self._base_config(),
            reason_on_tool_results=self._reason_on_tool_results,
            stop_after_thinking=self._stop_after_thinking,
            max_reasoning_chars=self._max_reasoning_chars,
            max_reasoning_seconds=self._max_reasoning_seconds,
        )

    @classmethod
    def _from_config(cls, config: ReasoningAgentConfig, model_client: ChatCompletionClient | None = None) -> Self:
        return cls(
            config.name,
            **agent_arguments(config, model_client),
            reason_on_tool_results=config.reason_on_tool_results,
            stop_after_thinking=config.stop_after_thinking,
            max_reasoning_chars=config.max_reasoning_chars,
            max_reasoning_seconds=config.max_reasoning_seconds,
        )
