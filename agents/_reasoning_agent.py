"""The reasoning half of the duet."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Iterator, Literal, Mapping, Optional, Sequence, Union

from autogen_agentchat.base import Response
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import CancellationToken, Component
from autogen_core.models import ChatCompletionClient, CreateResult, LLMMessage, RequestUsage, SystemMessage, UserMessage
from autogen_core.tools import BaseTool, ToolSchema, Workbench
from pydantic import Field
from typing_extensions import Self

from duet.workbenches import derived_from

from duet.agents._base import DuetAgent, DuetAgentConfig, DuetAgentOptions, agent_arguments, estimate_tokens
from duet.agents._cancellation import child_token, unlink_child
from duet.agents._conversation import as_transcript, ends_with_tool_results, last_user_text
from duet.agents._errors import UpstreamError, UpstreamStatusError, upstream_error_from_openai
from duet.agents._events import DuetEvent, ReasoningDelta, ReusedReasoning, Usage
from duet.agents._grounding import retrieved_context
from duet.agents._observe import observe_usage
from duet.agents._options import ReasoningEffort
from duet.agents.continuations import DEFAULT_REUSE_SECONDS, Continuation, ReasoningLedger, fingerprint
from duet.agents._messages import read_grounding, read_task, reasoning_reply, restores_reasoning
from duet.agents.upstream import STREAMED_TEXT_UNKEPT_ARG, OpenAICompatibleClient, derived_cache_key, streaming_create_args
from duet.agents._run import DuetRun
from duet.agents._text_parts import TextParts
from duet.agents._thinking import ReasoningSplitter, opens_thinking, remember_thinking

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

OnReasonerFailure = Literal["answer_alone", "fail"]
ClientControls = Literal["honour", "ignore"]

EFFORT_SHARE: dict[str, float] = {"low": 0.25, "medium": 0.6, "high": 1.0}
"""Of max_reasoning_chars, what an effort allows when the reasoner's upstream has no effort parameter."""
CHARS_PER_TOKEN = 4
"""A thinking budget in tokens, as a bound on the reasoning's characters (no budget parameter upstream)."""

UNAVAILABLE_NOTE = "[the reasoning model was unavailable ({error}); the answer model answers alone]"

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Effort:
    """How much the reasoner thinks on one request: not at all (``skip``), with these request fields
    (``create_args``: the upstream's own effort or budget parameter), within ``max_chars``."""

    skip: bool = False
    create_args: dict[str, Any] = field(default_factory=dict)
    max_chars: int | None = None
    asked: tuple[Any, ...] = ()
    """What the client asked (effort, budget): part of the reasoning ledger's key."""


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
    reuse_seconds: float = Field(
        DEFAULT_REUSE_SECONDS, ge=0,
        description="A retry of the same request (same key, conversation, tools and effort) within this many seconds "
        "reuses the reasoning instead of calling the reasoning model again. 0: never.",
    )
    on_failure: OnReasonerFailure = Field(
        "answer_alone", description="When the reasoning model is down (5xx, unreachable, timeout): 'answer_alone' (the "
        "answer model answers without reasoning, and the reasoning stream says why) or 'fail' (the request fails). "
        "Its 429 and other 4xx always fail the request.",
    )
    client_controls: ClientControls = Field(
        "honour", description="The client's reasoning controls (reasoning_effort, reasoning.effort, thinking): "
        "'honour' or 'ignore'.",
    )
    default_effort: Optional[ReasoningEffort] = Field(
        None, description="The effort of requests that name none (none/minimal: no reasoner call). None: as configured.")
    effort_parameter: Optional[str] = Field(
        None, description="The reasoner upstream's effort field (e.g. 'reasoning_effort'): an effort is passed on in it; "
        "without one, an effort bounds the reasoning's length (low 25 %, medium 60 %, high 100 % of max_reasoning_chars).",
    )
    budget_parameter: Optional[str] = Field(
        None, description="The reasoner upstream's thinking-budget field (tokens, e.g. 'thinking_budget'); without one, "
        "a budget bounds the reasoning to 4 characters a token.",
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
        reuse_seconds: a retry of the same request within this many seconds reuses the reasoning
            (the run's :class:`~duet.agents.continuations.ReasoningLedger`) instead of calling the model.
        on_failure: ``"answer_alone"``: a failing reasoning model costs the request its reasoning, not
            its answer (the reasoning stream says why); ``"fail"``: the request fails.
        client_controls, default_effort, effort_parameter, budget_parameter: how the client's reasoning
            effort or thinking budget drives the reasoner (``none``/``minimal``/a budget of 0: no call).

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
        reuse_seconds: float = DEFAULT_REUSE_SECONDS,
        on_failure: OnReasonerFailure = "answer_alone",
        client_controls: ClientControls = "honour",
        default_effort: ReasoningEffort | None = None,
        effort_parameter: str | None = None,
        budget_parameter: str | None = None,
    ) -> None:
        super().__init__(
            name, description, model_client, system_message=system_message, workbench=workbench, tools=tools
        )
        self._reason_on_tool_results = reason_on_tool_results
        self._stop_after_thinking = stop_after_thinking
        self._max_reasoning_chars = max_reasoning_chars
        self._max_reasoning_seconds = max_reasoning_seconds
        self._reuse_seconds = reuse_seconds
        self._on_failure = on_failure
        self._client_controls = client_controls
        self._default_effort = default_effort
        self._effort_parameter = effort_parameter
        self._budget_parameter = budget_parameter

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
        effort = self.effort(run)
        if effort.skip or (ends_with_tool_results(conversation) and not self._rethinks(messages)):
            yield Response(chat_message=reasoning_reply(self.name, ""))
            return
        grounding = read_grounding(messages)
        prompt = await self._prompt_of(conversation, grounding, run)
        if cancellation_token.is_cancelled():  # the client already left: start no model call
            raise asyncio.CancelledError()
        reuse = self._reuse(run, prompt, effort)
        kept = await reuse.find() if reuse is not None and reuse.seconds > 0 else None
        if kept is not None:
            for event in self._replay(kept, run):
                yield event
            return
        try:
            async for item in self._think(prompt, run, cancellation_token, effort, self._cache_key(run, conversation)):
                if isinstance(item, Response) and reuse is not None:
                    reuse.keep(getattr(item.chat_message, "content", ""), grounding)
                yield item
                del item  # handed on: the event is not kept while the model's next piece is awaited
        except Exception as exc:
            if self._on_failure == "fail" or not _model_down(exc):
                raise
            for event in self._answer_alone(exc):
                yield event

    async def _think(
        self, prompt: list[LLMMessage], run: DuetRun | None, cancellation_token: CancellationToken, effort: Effort,
        cache_key: str | None = None,
    ) -> AsyncGenerator[DuetEvent | Response, None]:
        """The model call (with ``cache_key`` as its ``prompt_cache_key``, when given): its reasoning
        streamed, cut at ``effort.max_chars`` or the time limit; then the usage and the reply."""
        call_token, timer = self._call_token(cancellation_token)
        max_chars = effort.max_chars
        splitter = ReasoningSplitter(opened=opens_thinking(self._model_client))
        parts = TextParts()
        size = 0
        result: CreateResult | None = None
        stopped = False
        limit_note = ""
        stream = self._model_stream("reasoner", run, prompt, cancellation_token=call_token,
                                    extra_create_args=self._create_args(effort, cache_key))
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
        for event in self._end(prompt, splitter, parts, limit_note, result, run):
            yield event

    def _create_args(self, effort: Effort, cache_key: str | None) -> Mapping[str, Any]:
        """The model call's arguments: the effort's, the cache key; and, to Duet's own client, that the
        reasoning is kept here (``parts``), not a second time in the stream's result, for as long as it streams."""
        extra: dict[str, Any] = {"prompt_cache_key": cache_key} if cache_key else {}
        if isinstance(self._model_client, OpenAICompatibleClient):
            extra[STREAMED_TEXT_UNKEPT_ARG] = True
        return streaming_create_args(self._model_client, {**effort.create_args, **extra} if extra else effort.create_args)

    def effort(self, run: DuetRun | None) -> Effort:
        """How much to think on ``run``'s request: the client's effort or budget (unless ignored), else the default."""
        options = run.options if run is not None and self._client_controls == "honour" else None
        level = (options.reasoning_effort if options is not None else None) or self._default_effort
        budget = options.reasoning_budget if options is not None else None
        limit = self._max_reasoning_chars or None
        if budget == 0 or level in ("none", "minimal"):
            return Effort(skip=True)
        if budget is not None:
            if self._budget_parameter:
                return Effort(create_args={self._budget_parameter: budget}, max_chars=limit, asked=(level, budget))
            return Effort(max_chars=min(limit or budget * CHARS_PER_TOKEN, budget * CHARS_PER_TOKEN), asked=(level, budget))
        if level is None:
            return Effort(max_chars=limit)
        if self._effort_parameter:
            return Effort(create_args={self._effort_parameter: level}, max_chars=limit, asked=(level,))
        share = int((limit or DEFAULT_MAX_REASONING_CHARS) * EFFORT_SHARE[level])
        return Effort(max_chars=share, asked=(level,))

    def _cache_key(self, run: DuetRun | None, conversation: Sequence[LLMMessage]) -> str | None:
        """The ``prompt_cache_key`` of this call, for an upstream that takes one (``cache_key``), derived
        from the client's own key (its answer model's) or from the conversation; ``None`` otherwise."""
        if run is None or not getattr(self._model_client, "takes_cache_key", False):
            return None
        client_key = run.options.create_args.get("prompt_cache_key")
        first_user = next((message for message in conversation if isinstance(message, UserMessage)), None)
        first_text = last_user_text([first_user]) if first_user is not None else ""
        return derived_cache_key(run.request.owner, run.request.pipeline, "reasoner",
                                 client_key if isinstance(client_key, str) else None, first_text)

    def _reuse(self, run: DuetRun | None, prompt: list[LLMMessage], effort: Effort) -> "_Reuse | None":
        """Where this request's reasoning is kept for its retries (``None``: no reuse)."""
        ledger = run.ledger if run is not None else None
        if ledger is None or run is None:
            return None
        seconds = ledger.window(self._reuse_seconds)
        if seconds <= 0 and run.note_digest is None:
            return None
        # Without reuse only the turn's note is kept (under the conversation's digest): no prompt to hash.
        digest = fingerprint(prompt, self._model_label(), effort.asked, effort.create_args, effort.max_chars) if seconds > 0 else ""
        return _Reuse(ledger, seconds, run.request.owner, run.request.pipeline, digest, run.note_digest)

    def _replay(self, kept: Continuation, run: DuetRun | None) -> Iterator[DuetEvent | Response]:
        """A reasoning kept for this very request: streamed again, no model called, no new tokens."""
        if kept.reasoning:
            yield ReusedReasoning(text=kept.reasoning, source=self.name)
        usage = Usage(source=self.name, prompt_tokens=0, completion_tokens=0, origin="reused")
        observe_usage(run, "reasoner", usage)
        yield usage
        yield Response(chat_message=reasoning_reply(self.name, kept.reasoning, RequestUsage(prompt_tokens=0, completion_tokens=0)))

    def _answer_alone(self, error: Exception) -> Iterator[DuetEvent | Response]:
        """The reasoning model failed: the client is told why, and the answer model answers without reasoning."""
        detail = str(error) if isinstance(error, UpstreamError) else type(error).__name__
        logger.warning("%s failed; the answer model answers alone: %s", self.name, detail)
        yield ReasoningDelta(text=UNAVAILABLE_NOTE.format(error=detail), source=self.name)
        yield Response(chat_message=reasoning_reply(self.name, ""))

    async def _prompt_of(self, conversation: list[LLMMessage], grounding: str, run: DuetRun | None) -> list[LLMMessage]:
        """The prompt of the turn: the conversation, the tools the answer agent will have, the retrieved context."""
        workbench = self._workbench_for(run)
        tools = await workbench.list_tools() if workbench is not None else []
        return self._prompt(conversation, tools, grounding)

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
             result: CreateResult | None, run: DuetRun | None) -> Iterator[DuetEvent | Response]:
        """Why the reasoning ends early (the client sees it; the answer agent goes on with it), or what
        the splitter still held; then the usage, and the reply."""
        if limit_note:
            limit_note = ("\n\n" if parts else "") + limit_note
            parts.append(limit_note)
            yield ReasoningDelta(text=limit_note, source=self.name)
        else:
            reasoning, content = splitter.flush()
            remember_thinking(self._model_client, splitter)
            if splitter.answer_was_reasoned:
                content = ""  # it was streamed as reasoning already (all the reasoner writes is)
            if reasoning or content:
                parts.append(reasoning + content)
                yield ReasoningDelta(text=reasoning + content, source=self.name)
        if result is not None:
            usage = result.usage
        else:  # closed early by design (end of thinking, a limit): its usage never arrived
            usage = RequestUsage(prompt_tokens=estimate_tokens(prompt), completion_tokens=len(parts))
        # All the reasoner writes is reasoning to the client (a draft answer after it is never shown).
        event = Usage(source=self.name, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                      reasoning_tokens=usage.completion_tokens, cached_tokens=getattr(result, "cached_tokens", 0),
                      origin="upstream" if result is not None else "estimate")
        if result is None:
            observe_usage(run, "reasoner", event)  # an upstream's own count reaches the observer with its result
        yield event
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
            reuse_seconds=self._reuse_seconds,
            on_failure=self._on_failure,
            client_controls=self._client_controls,
            default_effort=self._default_effort,
            effort_parameter=self._effort_parameter,
            budget_parameter=self._budget_parameter,
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
            reuse_seconds=config.reuse_seconds,
            on_failure=config.on_failure,
            client_controls=config.client_controls,
            default_effort=config.default_effort,
            effort_parameter=config.effort_parameter,
            budget_parameter=config.budget_parameter,
        )


def _model_down(error: Exception) -> bool:
    """The reasoning model is down (5xx, unreachable, silent, broken off, garbage): the answer model can
    answer alone. Its 429 and 4xx are not: a rate limit is passed on with its Retry-After (the client
    retries when it may), a refused request or a wrong key are not mended by skipping the reasoning."""
    upstream = error if isinstance(error, UpstreamError) else upstream_error_from_openai(error, None)
    if upstream is None:
        return False
    if isinstance(upstream, UpstreamStatusError):
        return upstream.upstream_status is None or upstream.upstream_status >= 500
    return True


@dataclass(frozen=True, slots=True)
class _Reuse:
    """One request's place in the reasoning ledger."""

    ledger: ReasoningLedger
    seconds: float
    owner: str
    pipeline: str
    digest: str
    prefix_digest: str | None  # the conversation's, when the reasoning is about its last message (a user turn, tool results)

    async def find(self) -> Continuation | None:
        return await self.ledger.find(self.owner, self.pipeline, self.digest)

    def keep(self, reasoning: str, grounding: str) -> None:
        self.ledger.keep(self.owner, self.pipeline, self.digest, reasoning, grounding, reuse_seconds=self.seconds,
                         prefix_digest=self.prefix_digest)
