"""The answer half of the duet."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Iterator, Mapping, Sequence

from autogen_agentchat.base import Response
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import CancellationToken, Component, FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import BaseTool, ToolResult, ToolSchema, Workbench
from autogen_core.tools._workbench import StreamWorkbench  # not exported by autogen_core.tools (0.7.5)
from pydantic import Field
from typing_extensions import Self

from duet.workbenches import DuetWorkbench

from duet.agents._model_reasoning import (
    DEFAULT_PASS_REASONING_BACK,
    ModelReasoning,
    PassReasoningBack,
    ReasonedAssistantMessage,
    for_request,
    reasoned_messages,
)
from duet.agents._base import DuetAgent, DuetAgentConfig, DuetAgentOptions, agent_arguments
from duet.agents._errors import UpstreamStatusError
from duet.agents._conversation import without_images
from duet.agents._upstream_calls import IssuedCall, issue, remember_ids, to_upstream, wants_short_ids
from duet.agents.upstream import CACHE_MARKS_ARG, add_usage, streaming_create_args
from duet.agents._events import ContentDelta, DuetEvent, FinishReason, ReasoningDelta, ToolCall, ToolCallsRequested, Usage
from duet.agents._grounding import retrieved_context
from duet.agents._messages import answer_reply, client_handoff, read_grounding, read_task
from duet.agents._observe import observe_client_tool_calls, observe_tool_call, observer_of
from duet.agents._options import AnswerOptions
from duet.agents._run import DuetRun, current_run
from duet.agents._text_parts import TextParts
from duet.agents._thinking import ReasoningSplitter, opens_thinking, remember_thinking

logger = logging.getLogger(__name__)

REASONING_PREAMBLE = (
    "A reasoning model thinks each user turn through before you answer it. Its reasoning follows the user's "
    "message, between <reasoning> and </reasoning> (with any retrieved context before it): use it to write your "
    "reply and to decide on tool calls; do not repeat it verbatim, and do not write such notes yourself."
)
"""The answer model's one fixed word on the reasoning notes (in its system message: the same bytes every turn)."""

REASONING_NOTE = "\n\n<reasoning>\n{reasoning}\n</reasoning>"
"""How a user turn's reasoning follows the user's message in the answer model's prompt."""

ANSWER_REASONING_LABEL = "[the answer model's own reasoning]\n"
"""Starts the answer model's own reasoning in the reasoning stream, when it follows the reasoner's."""

_FINISH_REASONS: dict[str, FinishReason] = {"stop": "stop", "length": "length", "content_filter": "content_filter"}
_DEFAULT_OPTIONS = AnswerOptions()


DEFAULT_MAX_TOOL_ROUNDS = 8


class AnswerAgentOptions(DuetAgentOptions):
    """How the answer agent works: the fields its config and the YAML ``answer:`` section share."""

    max_tool_rounds: int = Field(
        DEFAULT_MAX_TOOL_ROUNDS, ge=0, description="Rounds of service-tool calls before the model must answer."
    )
    pass_reasoning_back: PassReasoningBack = Field(
        DEFAULT_PASS_REASONING_BACK,
        description="Send the model's own reasoning back on its tool-calling turns (thinking models require it): "
        "true, false, or 'auto' (when the model produced reasoning).",
    )


class AnswerAgentConfig(AnswerAgentOptions, DuetAgentConfig):
    """The answer agent as a component: the shared agent fields, then its options."""


@dataclass(slots=True, eq=False)
class _AnswerTurn:
    """What the rounds of one answer turn share."""

    workbench: Workbench | None
    options: AnswerOptions
    tools: list[ToolSchema]
    tool_choice: Any  # "auto", "none", "required" or the chosen tool
    history: list[LLMMessage]  # the prompt, and the rounds of service tools so far
    create_args: Mapping[str, Any]
    reasoning: str  # the reasoner's (the model's own, after it, is labelled)
    pass_back: bool  # the model's own reasoning goes back on its tool-calling turns
    carries_reasoning: bool  # the history holds some of the model's own reasoning
    total: RequestUsage = field(default_factory=lambda: RequestUsage(prompt_tokens=0, completion_tokens=0))
    turn: list[LLMMessage] = field(default_factory=list)  # what this turn adds to the conversation
    issued: dict[str, IssuedCall] = field(default_factory=dict)  # the run's: Duet's call ids → the upstream's
    spoke: bool = False  # text from an earlier round was already streamed
    finished: bool = False


class AnswerAgent(DuetAgent, Component[AnswerAgentConfig]):
    """Replies with the reasoning in hand, calling the workbench's tools.

    Calls to service tools (anything in the workbench that is not a client's
    :class:`~duet.workbenches.ProxyTool`) run here, through the workbench, and their results go back to
    the model, for up to ``max_tool_rounds`` rounds. Calls to client tools end the turn: the agent
    hands off to ``client`` (a ``HandoffMessage`` whose context holds the calls), the team stops,
    and Duet returns the calls to the client, which sends the results in its next request.

    Example (no model is called before the agent's first turn):

    >>> from duet.agents import OpenAICompatibleClient
    >>> answerer = AnswerAgent("answerer", OpenAICompatibleClient("qwen2.5", "http://localhost:11434/v1"))
    >>> answerer.dump_component().config["max_tool_rounds"]
    8
    """

    component_config_schema = AnswerAgentConfig
    component_provider_override = "duet.agents.AnswerAgent"
    _model_client: ChatCompletionClient  # always given (only the grounding agent has none)

    def __init__(
        self,
        name: str,
        model_client: ChatCompletionClient,
        *,
        description: str = "Writes the reply using the reasoning, and calls tools.",
        system_message: str | None = None,
        workbench: Workbench | None = None,
        tools: Sequence[BaseTool[Any, Any]] | None = None,
        max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
        pass_reasoning_back: PassReasoningBack = DEFAULT_PASS_REASONING_BACK,
    ) -> None:
        super().__init__(
            name, description, model_client, system_message=system_message, workbench=workbench, tools=tools
        )
        self._max_tool_rounds = max_tool_rounds
        self._pass_reasoning_back = pass_reasoning_back

    def _prompt(self, conversation: Sequence[LLMMessage], reasoning: str, grounding: str = "",
                notes: Mapping[int, tuple[str, str]] | None = None) -> list[LLMMessage]:
        """One leading system message (ours, the client's, and, when reasoning is given, the fixed
        preamble), which every OpenAI-compatible server accepts; then the conversation, each user turn
        that was reasoned about followed, inside its message, by its reasoning (and retrieved context).

        The reasoning goes with the user turn it was made for, never into the system message: the next
        turn's request then starts with this one's, byte for byte (``notes``: the earlier turns' notes,
        by index in ``conversation``, put back where they were), and the upstream's prompt cache holds."""
        instructions = [self._system_message] if self._system_message else []
        start = 0
        while start < len(conversation) and isinstance(conversation[start], SystemMessage):
            instructions.append(conversation[start].content)  # type: ignore[arg-type]  # a SystemMessage's content is text
            start += 1
        body = list(conversation[start:])
        if not self._model_client.model_info.get("vision", False):
            body = without_images(body)
        if place_notes(body, start, reasoning, grounding, notes or {}):
            instructions.append(REASONING_PREAMBLE)
        head = [SystemMessage(content="\n\n".join(instructions))] if instructions else []
        return [*head, *body]

    async def _turn(
        self, messages: Sequence[BaseChatMessage], run: DuetRun | None, cancellation_token: CancellationToken
    ) -> AsyncGenerator[DuetEvent | Response, None]:
        state = await self._begin(messages, run)
        event: DuetEvent | Response
        for round_number in range(self._max_tool_rounds + 1):
            if cancellation_token.is_cancelled():
                raise asyncio.CancelledError()
            last_round = round_number == self._max_tool_rounds
            tools, tool_choice = self._offered(state, last_round)
            splitter = ReasoningSplitter(opened=opens_thinking(self._model_client))
            text_parts = TextParts()
            thinking_parts = TextParts()  # the model's own reasoning in this round
            result: CreateResult | None = None
            piece: str | CreateResult | None
            piece, stream, state.pass_back = await self._open_stream(
                state.history, state.pass_back, state.carries_reasoning, run, state.issued,
                tools=tools, tool_choice=tool_choice, extra_create_args=state.create_args, cancellation_token=cancellation_token,
            )
            while piece is not None:  # the opened stream's first piece, then the rest (no wrapper per piece)
                if isinstance(piece, CreateResult):
                    result = piece
                else:
                    thinking, text = splitter.feed(piece)
                    if thinking:
                        if not thinking_parts and state.reasoning:  # after the reasoner's reasoning: say whose this is
                            yield ReasoningDelta(text=ANSWER_REASONING_LABEL, source=self.name)
                        thinking_parts.append(thinking)
                        yield ReasoningDelta(text=thinking, source=self.name)
                    if text:
                        if state.spoke and not text_parts:
                            text = "\n\n" + text  # a new round's text starts a new paragraph
                        text_parts.append(text)
                        yield ContentDelta(text=text)
                piece = await anext(stream, None)
            for event in self._end_of_stream(state, splitter, text_parts, thinking_parts, result):
                yield event
            assert result is not None
            answer = text_parts.join().lstrip("\n")
            if isinstance(result.content, str):
                yield self._reply(answer, _FINISH_REASONS.get(result.finish_reason, "stop"), state.total)
                return
            async for event in self._tool_round(state, result, answer, thinking_parts, last_round, run, cancellation_token):
                yield event
            if state.finished:
                return

    async def _begin(self, messages: Sequence[BaseChatMessage], run: DuetRun | None) -> _AnswerTurn:
        """What the rounds of the turn share: the prompt, the tools and the tool choice, the answer
        model's arguments, and whether the model's own reasoning goes back on its tool-calling turns
        (``auto``: when it produced some)."""
        conversation, reasoning = read_task(messages)
        workbench = self._workbench_for(run)
        options = run.options if run is not None else _DEFAULT_OPTIONS
        tools = await workbench.list_tools() if workbench is not None else []
        notes = await run.notes_recalled() if run is not None else None
        history = self._prompt(conversation, reasoning, read_grounding(messages), notes)
        tool_choice: Any = options.tool_choice
        if tool_choice not in ("auto", "none", "required"):
            tool_choice = next((t for t in getattr(workbench, "tools", ()) if t.name == tool_choice), None)
            if tool_choice is None:
                raise ValueError(f"tool_choice names {options.tool_choice!r}, which is not among the tools")
        reasoned = reasoned_messages(history)
        pass_back = self._pass_reasoning_back is True or (
            self._pass_reasoning_back == "auto" and (self._model_thinks() or any(m.reasoning.from_model for m in reasoned))
        )
        create_args = streaming_create_args(self._model_client, options.create_args)
        if options.cache_marks and getattr(self._model_client, "sends_cache_marks", False):  # a Duet client whose upstream takes them
            create_args = {**create_args, CACHE_MARKS_ARG: options.cache_marks}
        return _AnswerTurn(workbench, options, tools, tool_choice, history, create_args,
                           reasoning, pass_back=pass_back, carries_reasoning=bool(reasoned),
                           issued=run.issued_calls if run is not None else {})

    def _offered(self, state: _AnswerTurn, last_round: bool) -> tuple[list[ToolSchema], Any]:
        """The tools and the tool choice of a round; out of service-tool rounds, only the client's
        tools are left to call."""
        if not last_round:
            return state.tools, state.tool_choice
        tools = [t for t in state.tools if self._client_tool(state.workbench, t["name"]) is not None]
        tool_choice = state.tool_choice
        if not isinstance(tool_choice, str) and self._client_tool(state.workbench, tool_choice.name) is None:
            tool_choice = "auto"
        return tools, tool_choice

    def _end_of_stream(self, state: _AnswerTurn, splitter: ReasoningSplitter, text_parts: TextParts, thinking_parts: TextParts,
                       result: CreateResult | None) -> Iterator[DuetEvent]:
        """What the splitter still held, then the round's usage."""
        thinking, text = splitter.flush()
        remember_thinking(self._model_client, splitter)
        if splitter.answer_was_reasoned:  # no </think> came: what was taken for the model's thinking is its answer
            thinking_parts.clear()
        if thinking:
            thinking_parts.append(thinking)
            yield ReasoningDelta(text=thinking, source=self.name)
        if text:
            text_parts.append(text)
            yield ContentDelta(text=text)
        state.spoke = state.spoke or bool(text_parts)
        assert result is not None
        state.total = add_usage(state.total, result.usage)
        yield Usage(source=self.name, prompt_tokens=result.usage.prompt_tokens, completion_tokens=result.usage.completion_tokens,
                    reasoning_tokens=getattr(result, "reasoning_tokens", 0), cached_tokens=getattr(result, "cached_tokens", 0))

    async def _tool_round(
        self, state: _AnswerTurn, result: CreateResult, answer: str, thinking_parts: TextParts, last_round: bool,
        run: DuetRun | None, cancellation_token: CancellationToken,
    ) -> AsyncGenerator[DuetEvent | Response, None]:
        """A round that ended in tool calls: service tools run here, then the next round; a call of a
        client tool ends the turn (``state.finished``), handing the calls to the client."""
        workbench = state.workbench
        # Duet issues its own call ids (upstreams repeat or omit theirs, and clients key on them); the
        # upstream's ids and provider fields are kept, to be sent back to it.
        remember_ids(self._model_client, result.content)  # type: ignore[arg-type]
        calls = issue(result.content, state.issued)  # type: ignore[arg-type]
        if state.options.single_tool_call:
            calls = calls[:1]
        client_calls, service_calls, client_names = _split_calls(workbench, calls)
        if last_round and service_calls:
            logger.warning("%s is out of tool rounds (%d); not running %s", self.name, self._max_tool_rounds,
                           ", ".join(call.name for call in service_calls))
            calls, service_calls = client_calls, []
            if not calls:
                state.finished = True
                yield self._reply(answer, "stop", state.total)
                return
        results: list[FunctionExecutionResult] = []
        if service_calls:
            async for event in self._run_service_calls(workbench, service_calls, results, cancellation_token):
                yield event
        # The whole round, as the model made it (every call, with its reasoning on them), then the results known here.
        state.turn += [self._asked(state, calls, answer, thinking_parts, result), FunctionExecutionResultMessage(content=results)]
        if client_calls:
            state.finished = True
            for handing_off in self._hand_off(state, client_calls, client_names, run):  # the calls, then the handoff
                yield handing_off
            return
        state.history += state.turn[-2:]
        if state.tool_choice != "none":
            state.tool_choice = "auto"  # 'required' or a named tool applies to the first round only

    def _asked(self, state: _AnswerTurn, calls: list[FunctionCall], answer: str, thinking_parts: TextParts,
               result: CreateResult) -> AssistantMessage:
        """The model's message of a tool round, with its own reasoning on the calls when it produced some."""
        own_reasoning = self._own_reasoning(thinking_parts, result)
        if own_reasoning is None:
            return AssistantMessage(content=calls, thought=answer or None, source=self.name)
        state.carries_reasoning = True
        state.pass_back = state.pass_back or self._pass_reasoning_back == "auto"
        return ReasonedAssistantMessage(content=calls, thought=answer or None, source=self.name, reasoning=own_reasoning)

    def _hand_off(self, state: _AnswerTurn, client_calls: list[FunctionCall], names: list[str],
                  run: DuetRun | None) -> Iterator[DuetEvent | Response]:
        """The client's calls (``names``: the client's own name of each), then the handoff that ends the
        turn. Its context is the turn the client will not see (service calls and their results, earlier
        service-only rounds): Duet keeps it for the follow-up with the client's results."""
        observe_client_tool_calls(run, names)
        yield ToolCallsRequested(
            calls=[ToolCall(id=call.id, name=name, arguments=call.arguments) for call, name in zip(client_calls, names, strict=True)]
        )
        yield Response(chat_message=client_handoff(self.name, client_calls, state.turn, state.total))

    def _model_thinks(self) -> bool:
        """The model was seen producing reasoning (Duet's client remembers how its upstream spells it)."""
        return getattr(self._model_client, "reasoning_field", None) is not None

    @staticmethod
    def _own_reasoning(thinking_parts: TextParts, result: CreateResult) -> ModelReasoning | None:
        """The reasoning the model produced on a round of tool calls, as its upstream spelled it."""
        details = getattr(result, "reasoning_details", None)
        if not thinking_parts and not details:
            return None
        field = getattr(result, "reasoning_field", None) or "reasoning_content"
        return ModelReasoning(text=thinking_parts.join(), field=field, details=details)

    async def _open_stream(
        self, history: list[LLMMessage], pass_back: bool, carries_reasoning: bool, run: DuetRun | None,
        issued: dict[str, IssuedCall], **arguments: Any
    ) -> tuple[str | CreateResult, AsyncGenerator[str | CreateResult, None], bool]:
        """The model's stream for ``history`` (its reasoning passed back or not), opened: its first
        piece, the stream, and whether it passes the reasoning back. In ``auto``, an upstream that
        refuses the request for want of reasoning (DeepSeek's HTTP 400 "Missing `reasoning_content`
        field") is asked again with it."""
        field = getattr(self._model_client, "reasoning_field", None)
        request = for_request(history, pass_back, field) if pass_back or carries_reasoning else history
        short_ids = wants_short_ids(self._model_client)
        if issued or short_ids:  # the upstream gets back its own call ids and fields (Mistral: ids of its shape)
            request = to_upstream(request, issued, short_ids)
        stream = self._model_stream("answer", run, request, **arguments)
        try:
            first = await anext(stream)
        except UpstreamStatusError as exc:
            await stream.aclose()
            if pass_back or self._pass_reasoning_back != "auto" or not _asks_for_reasoning(exc):
                raise
            logger.info("%s: the answer model wants its reasoning back on tool-calling turns; sending it", self.name)
            return await self._open_stream(history, True, carries_reasoning, run, issued, **arguments)
        return first, stream, pass_back

    def _reply(self, text: str, finish_reason: FinishReason, usage: RequestUsage) -> Response:
        return Response(chat_message=answer_reply(self.name, text, finish_reason, usage))

    @staticmethod
    def _client_tool(workbench: Workbench | None, name: str) -> Any:
        return workbench.client_tool(name) if isinstance(workbench, DuetWorkbench) else None

    async def _run_service_calls(
        self,
        workbench: Workbench | None,
        calls: Sequence[FunctionCall],
        results: list[FunctionExecutionResult],
        cancellation_token: CancellationToken,
    ) -> AsyncGenerator[DuetEvent, None]:
        """Runs the calls concurrently through the workbench; reports each as a reasoning line so a
        long round is not a silent one. Results land in ``results`` in call order."""
        for call in calls:
            yield ReasoningDelta(text=f"\n[calling {call.name} {call.arguments}]\n", source=self.name)
        observer = observer_of(current_run())
        outcomes = await asyncio.gather(
            *(observe_tool_call(observer, call.name, self._call_tool(workbench, call, cancellation_token)) for call in calls))
        for call, outcome in zip(calls, outcomes, strict=True):
            results.append(outcome)
            status = "failed" if outcome.is_error else "returned"
            yield ReasoningDelta(text=f"[{call.name} {status}]\n", source=self.name)

    @staticmethod
    async def _call_tool(
        workbench: Workbench | None, call: FunctionCall, cancellation_token: CancellationToken
    ) -> FunctionExecutionResult:
        def failure(message: str) -> FunctionExecutionResult:
            return FunctionExecutionResult(content=message, call_id=call.id, name=call.name, is_error=True)

        if workbench is None:
            return failure(f"Tool {call.name} not found.")
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            return failure(f"The arguments are not valid JSON: {exc}")
        if not isinstance(arguments, dict):
            return failure("The arguments must be a JSON object.")
        result: ToolResult | None = None
        if isinstance(workbench, StreamWorkbench):
            async for item in workbench.call_tool_stream(call.name, arguments, cancellation_token, call_id=call.id):
                if isinstance(item, ToolResult):
                    result = item
        else:
            result = await workbench.call_tool(call.name, arguments, cancellation_token, call_id=call.id)
        if result is None:
            return failure(f"Tool {call.name} returned nothing.")
        return FunctionExecutionResult(content=result.to_text(), call_id=call.id, name=call.name, is_error=result.is_error)

    def _to_config(self) -> AnswerAgentConfig:
        return AnswerAgentConfig(
            **self._base_config(), max_tool_rounds=self._max_tool_rounds, pass_reasoning_back=self._pass_reasoning_back
        )

    @classmethod
    def _from_config(cls, config: AnswerAgentConfig, model_client: ChatCompletionClient | None = None) -> Self:
        return cls(
            config.name,
            **agent_arguments(config, model_client),
            max_tool_rounds=config.max_tool_rounds,
            pass_reasoning_back=config.pass_reasoning_back,
        )


def _split_calls(workbench: Workbench | None, calls: list[FunctionCall]) -> tuple[list[FunctionCall], list[FunctionCall], list[str]]:
    """The calls of the client's tools, the others (the service's), and the client's own name of each
    client call: one look at the workbench per call."""
    client_calls: list[FunctionCall] = []
    service_calls: list[FunctionCall] = []
    client_names: list[str] = []
    find = workbench.client_tool if isinstance(workbench, DuetWorkbench) else None
    for call in calls:
        tool = find(call.name) if find is not None else None
        if tool is None:
            service_calls.append(call)
        else:
            client_calls.append(call)
            client_names.append(tool.client_name)
    return client_calls, service_calls, client_names


def reasoning_note(reasoning: str, grounding: str = "") -> str:
    """What follows a user's message in the answer model's prompt: the retrieved context, the reasoning."""
    note = "\n\n" + retrieved_context(grounding) if grounding else ""
    return note + REASONING_NOTE.format(reasoning=reasoning) if reasoning else note


def place_notes(body: list[LLMMessage], offset: int, reasoning: str, grounding: str,
                notes: Mapping[int, tuple[str, str]]) -> bool:
    """Places the notes in ``body`` (``notes``: (reasoning, grounding) by index in the whole conversation,
    ``offset`` being the index of ``body[0]``): a user message's note inside it, after its text; the note
    of tool results a reasoner thought again on as a user message right after them. This run's
    ``reasoning`` and ``grounding`` go with the conversation's last message: inside the latest user
    message, or, when the conversation ends with tool results of a turn that has its note, the part of
    ``reasoning`` that is not that note (a reasoner that thought again) after them. Every note stays where an earlier request
    put it, so each request begins with the previous one. True when a note was placed."""
    last_user = next((i for i in range(len(body) - 1, -1, -1) if isinstance(body[i], UserMessage)), None)
    placed = False
    after_results: list[tuple[int, str]] = []
    for index, (earlier_reasoning, earlier_grounding) in notes.items():
        at = index - offset
        if 0 <= at < len(body) and at != last_user and isinstance(body[at], UserMessage):
            placed = _append_note(body, at, reasoning_note(earlier_reasoning, earlier_grounding)) or placed
        elif 0 <= at < len(body) - 1 and isinstance(body[at], FunctionExecutionResultMessage) and earlier_reasoning:
            after_results.append((at, reasoning_note(earlier_reasoning).lstrip("\n")))
    own = notes.get(last_user + offset) if last_user is not None else None
    if body and isinstance(body[-1], FunctionExecutionResultMessage) and own is not None and last_user is not None:
        placed = _append_note(body, last_user, reasoning_note(*own)) or placed
        rethought = reasoning[len(own[0]):].lstrip("\n") if reasoning.startswith(own[0]) else reasoning
        if rethought:
            after_results.append((len(body) - 1, reasoning_note(rethought).lstrip("\n")))
            placed = True
    elif last_user is not None:
        # Also a round's follow-up whose turn has no note (its round was not restored: ids Duet did not
        # issue, a lost store): the reasoning about the turn goes in the turn, not after the results
        # (where a user message is refused by some servers, Mistral's among them).
        placed = _append_note(body, last_user, reasoning_note(reasoning, grounding)) or placed
    elif reasoning or grounding:
        body.append(UserMessage(content=reasoning_note(reasoning, grounding).lstrip("\n"), source="user"))
        placed = True
    for at, note in sorted(after_results, reverse=True):  # from the end: the earlier indices hold
        body.insert(at + 1, UserMessage(content=note, source="user"))
    return placed or bool(after_results)


def _append_note(body: list[LLMMessage], at: int, note: str) -> bool:
    if not note:
        return False
    message = body[at]
    content = message.content
    if isinstance(content, str):
        body[at] = UserMessage(content=content + note, source=message.source)  # type: ignore[union-attr]
    else:
        body[at] = UserMessage(content=[*content, note.lstrip("\n")], source=message.source)  # type: ignore[union-attr]
    return True


def _asks_for_reasoning(error: UpstreamStatusError) -> bool:
    """The upstream refused a request for want of the reasoning of an assistant message (HTTP 400)."""
    return error.upstream_status == 400 and "reasoning" in str(error).lower()

