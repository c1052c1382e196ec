"""Running the duet on one conversation: the code path the HTTP service and Python scripts share.

A run (:meth:`Duet.start`) leases a team from the pipeline's pool, binds the request to it
(:func:`~duet.agents._run.bind_run`), hands it the task (:mod:`duet.agents._messages`) and
reads what the team yields, while the agents' events reach the caller through the run's
:class:`~duet.agents.pipeline._stream.DuetStream`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Sequence

from autogen_agentchat.base import Team
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import CancellationToken, ComponentModel
from autogen_core.models import AssistantMessage, ChatCompletionClient, FunctionExecutionResultMessage, LLMMessage, UserMessage
from typing_extensions import Unpack

from duet.workbenches import DuetWorkbench, RequestContext, ServiceTools

from duet.agents._cancellation import RunToken
from duet.agents.continuations import (
    Continuation,
    ContinuationStore,
    GuardedStore,
    MemoryContinuationStore,
    ReasoningLedger,
    StoreUnavailable,
    prefix_digests,
    owned,
    splice,
    tool_rounds,
)
from duet.agents._conversation import DUET_CALL_ID, ends_with_tool_results
from duet.agents._events import DuetEvent, Failed, Finished, FinishReason
from duet.agents._ids import random_id
from duet.agents._messages import AnswerReply, ClientHandoff, GroundingReply, ReasoningReply, read_reply, task_messages
from duet.agents._observe import RunObserver, request_sent_hook
from duet.agents.pipeline._pool import TeamPool, TeamSlot
from duet.agents.pipeline._result import DuetResult
from duet.agents._request import DuetRequest, RequestFields
from duet.agents._run import DuetRun, bind_run
from duet.agents._upstream_calls import issued_in
from duet.agents.runtime import LeanAgentRuntime
from duet.agents._settings import PipelineSettings, ReasoningOutput
from duet.agents.pipeline._stream import DuetStream, EventChannel
from duet.agents.pipeline._team import reset_team
from duet.agents.pipeline._team_factory import TeamFactory
from duet.agents.pipeline._team_files import load_team_config, service_tools_of

logger = logging.getLogger(__name__)

SETTLE_TIMEOUT = 5.0
"""Seconds the handlers of a cancelled or failed run get to end before they are cancelled."""


def _stop_if_cancelled(token: CancellationToken) -> None:
    if token.is_cancelled():
        raise asyncio.CancelledError()


class Duet:
    """A pipeline ready to run: a team of a :class:`ReasoningAgent` and an :class:`AnswerAgent` (or a
    team file), the tools the service runs itself, and how reasoning is shown.

    Build it from settings or a team file, open it (starts its MCP servers), then run it on an
    OpenAI-style conversation::

        async with Duet.from_settings(PipelineSettings(answer=AnswerSettings(model="qwen2.5:7b"))) as duet:
            async for event in duet.stream([{"role": "user", "content": "Hi"}], tools=openai_tools):
                print(event)

    Each run leases a team, binds the request (events sink, the request's workbench with the
    client's tools as :class:`~duet.workbenches.ProxyTool` objects beside the service tools, the answer
    options) and runs the team on its AutoGen runtime.
    """

    def __init__(
        self,
        team_factory: TeamFactory,
        *,
        name: str = "duet",
        services: ServiceTools | None = None,
        reasoning_output: ReasoningOutput = "reasoning_content",
        continuations: ContinuationStore | None = None,
        max_idle_teams: int = 64,
        reuse_seconds: float | None = None,
    ) -> None:
        """``team_factory`` makes the pipeline's teams; the pipeline owns it from here on (:meth:`close`).
        ``reuse_seconds``, when given, overrides its reasoner's ``reuse_seconds`` (0: a retry never
        reuses the reasoning of the request it repeats)."""
        self.name = name
        self.reasoning_output: ReasoningOutput = reasoning_output
        self.services = services or ServiceTools()
        store = continuations or MemoryContinuationStore()
        # Guarded whatever it is (a store passed in from Python, memory://): a fault or a hang costs a
        # round its hidden part, bounded and logged once per outage, never the request.
        self.continuations = store if isinstance(store, GuardedStore) else GuardedStore(store)
        self.ledger = ReasoningLedger(self.continuations, reuse_seconds=reuse_seconds)
        self._team_factory = team_factory
        self._pool = TeamPool(team_factory, max_idle_teams)

    @classmethod
    def from_settings(cls, settings: PipelineSettings, *, continuations: ContinuationStore | None = None,
                      reuse_seconds: float | None = None) -> "Duet":
        """Creates the pipeline's model clients and service tools once; every team it runs shares them."""
        services = ServiceTools.from_settings(settings.tools)
        if settings.grounding is not None and not settings.tools.mcp:  # MCP servers' tools are known once they run
            unknown = set(settings.grounding.tools) - {tool.name for tool in services.tools}
            if unknown:
                raise ValueError(f"pipeline '{settings.name}': grounding names {', '.join(sorted(unknown))}, which is not "
                                 f"among its service tools ({', '.join(sorted(t.name for t in services.tools)) or 'none'})")
        return cls(
            TeamFactory.from_settings(settings),
            name=settings.name,
            services=services,
            reasoning_output=settings.reasoning_output,
            continuations=continuations,
            reuse_seconds=reuse_seconds,
        )

    @classmethod
    def from_team(
        cls,
        team: ComponentModel | Mapping[str, Any] | str | Path,
        *,
        name: str = "duet",
        reasoning_output: ReasoningOutput = "reasoning_content",
        continuations: ContinuationStore | None = None,
        reuse_seconds: float | None = None,
    ) -> "Duet":
        """Serves a team component (a dict, a ``ComponentModel`` or a JSON file path), e.g. one
        exported by ``duet export-team`` or edited in AutoGen Studio.

        The team is loaded once here, so a broken file fails at startup, naming the provider
        that could not be loaded. Duet's own team is then served as a settings pipeline is (the lean
        runtime; model clients made for concurrent use created once and shared, any other client
        loaded for each pooled team: see :class:`TeamFactory`); any other team is loaded whole for
        each pooled team. The client tools of each request join the team's service tools (the
        non-client tools of its answer agent).
        """
        config = load_team_config(team)
        factory = TeamFactory(config, origin=str(team) if isinstance(team, (str, Path)) else "component")
        return cls(factory, name=name, services=ServiceTools(service_tools_of(config)),
                   reasoning_output=reasoning_output, continuations=continuations, reuse_seconds=reuse_seconds)

    @property
    def model_clients(self) -> list[ChatCompletionClient]:
        """The model clients every team of this pipeline shares (readiness probes ask their servers)."""
        return self._team_factory.model_clients

    @property
    def service_tool_names(self) -> frozenset[str]:
        return self.services.names

    async def open(self) -> "Duet":
        """Starts what runs beside the pipeline (its MCP servers). Raises if one cannot start."""
        await self.services.open()
        return self

    async def close(self) -> None:
        """Stops the MCP servers, closes the idle teams, then the team factory (the model clients
        the teams share)."""
        await self.services.close()
        await self.ledger.settle()
        for slot in self._pool.drain():
            await slot.close()
        await self._team_factory.close()

    async def __aenter__(self) -> "Duet":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def new_team(self) -> Team:
        """A fresh team of this pipeline, loaded from its component on an embedded runtime: run it
        with AgentChat directly (``await team.run(task=...)``) or dump it. Nothing of it is shared
        with the served teams: its agents have model clients of their own, which closing the
        pipeline does not close. The caller closes its agents when done with it (each closes its
        model client; AgentChat teams have no close of their own)."""
        return self._team_factory.standalone()

    def start(
        self,
        request: DuetRequest | Sequence[Mapping[str, Any]] | Sequence[LLMMessage],
        *,
        cancellation_token: CancellationToken | None = None,
        observer: RunObserver | None = None,
        **fields: Unpack[RequestFields],
    ) -> DuetStream:
        """Starts one run of the duet on ``request`` (call from a coroutine) and returns it at once.

        ``request`` is a :class:`~duet.agents.DuetRequest` (what the HTTP service's readers build) or,
        from Python, an OpenAI ``messages`` list (or AutoGen ``LLMMessage`` objects) with the other
        fields of :meth:`DuetRequest.of <duet.agents.DuetRequest.of>` as keywords: ``tools`` (an
        OpenAI ``tools`` list or :class:`ProxyTool` objects), ``options``, ``user``, ``owner`` (whose
        stored state the run reads and writes; runs from Python share the default owner) and
        ``request_id``::

            stream = duet.start([{"role": "user", "content": "Hi"}], tools=openai_tools)

        The run binds the request (event sink, the request's workbench, the answer options) and runs
        a leased team on its runtime; cancelling ``cancellation_token`` or closing the stream stops it.
        The run keeps pace with its reader: once :data:`~duet.agents.pipeline.MAX_BUFFERED_EVENTS`
        events wait unread, the agents stop reading their models' streams until the reader catches up
        (or closes the stream). A token cancelled before the run starts ends it at once with
        ``Failed``, before any model is called. ``observer`` is told of every model, tool and store
        call of the run (:mod:`duet.agents._observe`).
        """
        if not isinstance(request, DuetRequest):
            request = DuetRequest.of(request, **fields)
        elif fields:
            raise TypeError(f"start() takes a DuetRequest whole; {', '.join(fields)} belong in it")
        channel = EventChannel()
        context = RequestContext(request_id=request.request_id or random_id(), user=request.user, pipeline=self.name,
                                 owner=request.owner)
        run = DuetRun(
            emit=channel.emit,
            room=channel.room,
            workbench=DuetWorkbench.for_request(self.services.tools, request.tools, request=context),
            options=request.options,
            request=context,
            observer=observer,
            ledger=self.ledger,
        )
        token = cancellation_token or RunToken()
        token.add_callback(channel.close)  # a cancelled run's agents must not wait for a reader
        hook = request_sent_hook.set(channel.mark_request_out)  # for the run's tasks: they copy the context
        try:
            begun = self._begin_at_once(request.conversation, run, token)
            driver = asyncio.create_task(self._drive(request.conversation, run, token, begun))
        finally:
            request_sent_hook.reset(hook)
        return DuetStream(channel, driver, token)

    def _begin_at_once(self, conversation: list[LLMMessage], run: DuetRun, token: CancellationToken) -> "_Begun | None":
        """The run's first steps, taken in the caller's own step when they need no store call (no tool
        round to restore, no earlier calls' ids to recall): the first speaker's turn is made here, so it
        begins (its model request goes out) at the event loop's next pass, not a pass later behind the
        run's own task; on a busy worker each pass is long. ``None``: the run takes these steps itself,
        after its store calls. An error is kept for the run to report as its own (:meth:`_drive`)."""
        if ends_with_tool_results(conversation) or _earlier_call_ids(conversation):
            return None
        begun = _Begun()
        try:
            with bind_run(run):  # the turn's task copies the binding, as it would inside the run's task
                _stop_if_cancelled(token)  # the client left before the run started: no store call, no model call
                self._recall_notes(conversation, conversation, run, None, "")
                begun.task = task_messages(conversation, None, "")
                begun.slot = self._pool.acquire()
                if begun.slot.first_speaker is not None:
                    begun.slot.first_speaker.start_turn_ahead(begun.task, run, token)
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - the run reports it (and settles the slot)
            begun.error = exc
        return begun

    async def stream(
        self, request: DuetRequest | Sequence[Mapping[str, Any]] | Sequence[LLMMessage], **kwargs: Any
    ) -> AsyncIterator[DuetEvent]:
        """Runs the duet once, yielding :mod:`duet.agents._events` until ``Finished`` or ``Failed``.
        Takes the arguments of :meth:`start`; leaving the loop early stops the run::

            async for event in duet.stream([{"role": "user", "content": "Hi"}], tools=openai_tools):
                print(event)
        """
        stream = self.start(request, **kwargs)
        try:
            async for event in stream:
                yield event
        finally:
            await stream.close()

    async def run(self, request: DuetRequest | Sequence[Mapping[str, Any]] | Sequence[LLMMessage], **kwargs: Any) -> DuetResult:
        """Like :meth:`stream`, collected into one :class:`DuetResult`. Raises the run's error."""
        events = [event async for event in self.stream(request, **kwargs)]
        if isinstance(events[-1], Failed):
            raise events[-1].error
        return DuetResult.of(events)

    async def _drive(self, conversation: list[LLMMessage], run: DuetRun, token: CancellationToken, begun: "_Begun | None") -> None:
        with bind_run(run):  # the team's runtime is started inside: its tasks inherit the binding
            slot: TeamSlot | None = None
            clean = False
            try:
                if begun is None:
                    _stop_if_cancelled(token)  # the client left before the run started: no store call, no model call
                    sent = conversation
                    conversation, earlier_reasoning, grounding = await self._restore(conversation, run.request.owner, run)
                    self._recall_notes(sent, conversation, run, earlier_reasoning, grounding)
                    task = task_messages(conversation, earlier_reasoning, grounding)
                    _stop_if_cancelled(token)
                    slot = self._pool.acquire()
                else:  # taken in the caller's step (_begin_at_once)
                    slot, task, earlier_reasoning, grounding = begun.slot, begun.task, None, ""
                    if begun.error is not None:
                        raise begun.error
                    assert slot is not None, "a run begun without an error has its team"
                await self._start_team(slot, task, run, token, turn_started=begun is not None)
                finish_reason, hidden_part_lost = await self._follow(
                    slot, task, token, run, earlier_reasoning or "", grounding, rethinking=ends_with_tool_results(conversation))
                run.emit(Finished(finish_reason=finish_reason, hidden_part_lost=hidden_part_lost))
                clean = True
            except asyncio.CancelledError as exc:
                run.emit(Failed(message="the run was cancelled", error=exc))  # ends the stream of whoever still reads it
                if not token.is_cancelled():
                    raise
            except Exception as exc:  # noqa: BLE001 - an agent already reported its own failure; this covers the rest
                run.emit(Failed(message=str(exc), error=exc))
            finally:
                if isinstance(run.recalling, asyncio.Future) and not run.recalling.done():
                    run.recalling.cancel()  # no answer turn took the notes
                await run.drop_head_start()  # a turn started ahead that the team never reached
                if slot is not None:
                    if not clean:
                        token.cancel()  # whatever of the run still goes on stops at its next await
                    await self._settle(slot, clean)

    @staticmethod
    async def _start_team(slot: TeamSlot, task: list[BaseChatMessage], run: DuetRun, token: CancellationToken,
                          turn_started: bool = False) -> None:
        """The first speaker's turn starts before the team routes the task to it (``turn_started``: it
        already has); then the team's runtime."""
        if slot.first_speaker is not None:
            if not turn_started:
                await slot.first_speaker.head_start(task, run, token)
            # The team's routing (AgentChat's messages, a few hundred microseconds of CPU) waits until the
            # first event is on its way to the client: it is not on the path of the first token.
            await run.head_start_under_way()
        if slot.runtime is not None:
            slot.runtime.start()

    async def _follow(self, slot: TeamSlot, task: list[BaseChatMessage], token: CancellationToken, run: DuetRun,
                      earlier_reasoning: str, grounding: str, *, rethinking: bool) -> tuple[FinishReason, bool]:
        """Reads the team's replies until it stops: why the run finished, and whether the hidden part of
        a round that ends with client tool calls was lost (the store was down). That hidden part is kept
        with the reasoning of the user turn it belongs to (this run's, else the restored one: a reasoner
        that thinks again on tool results, ``rethinking``, keeps that reasoning as the note after the
        results instead) and its retrieved context (this round's results, else the restored ones)."""
        finish_reason: FinishReason = "stop"
        hidden_part_lost = False
        reasoning: list[str] = []
        async for message in slot.team.run_stream(task=task, cancellation_token=token, output_task_messages=False):
            reply = read_reply(message)
            if isinstance(reply, ReasoningReply):
                if reply.text:
                    reasoning.append(reply.text)
            elif isinstance(reply, GroundingReply):
                grounding = reply.text or grounding
            elif isinstance(reply, ClientHandoff):
                finish_reason = "tool_calls"
                turn_reasoning = earlier_reasoning if rethinking else "\n\n".join(reasoning) or earlier_reasoning
                hidden_part_lost = not await self._keep(reply.turn, run, turn_reasoning, grounding)
            elif isinstance(reply, AnswerReply):
                finish_reason = reply.finish_reason
            # A FailureReply: the agent already sent Failed; the team ended cleanly and can be reused.
        return finish_reason, hidden_part_lost

    def _recall_notes(self, sent: list[LLMMessage], conversation: list[LLMMessage], run: DuetRun,
                      earlier_reasoning: str | None, grounding: str) -> None:
        """The notes of the conversation's earlier turns (their reasoning, put back in the answer model's
        prompt where it was: after a user message, or after tool results a reasoner thought again on),
        fetched in one store call while the reasoner thinks; and the key the reasoning of this run is kept
        under. The keys are digests of the conversation as the client ``sent`` it (the same on every later
        turn, whatever hidden part of a round is put back); the notes are by index in ``conversation``."""
        digests = prefix_digests(sent, (UserMessage, FunctionExecutionResultMessage))
        if not digests:
            return
        last = len(sent) - 1
        run.note_digest = digests.get(last)
        last_user = max((i for i in digests if isinstance(sent[i], UserMessage)), default=None)
        if last_user is not None and last_user != last and earlier_reasoning is not None:
            run.notes[last_user] = (earlier_reasoning, grounding)  # a tool round's follow-up: its turn's reasoning was restored
        wanted = {index: digest for index, digest in digests.items() if index != last}
        if wanted:
            run.recalling = asyncio.ensure_future(self._fetch_notes(run, wanted, _restored_positions(sent, conversation, wanted)))

    async def _fetch_notes(self, run: DuetRun, wanted: dict[int, str], positions: Mapping[int, int]) -> None:
        found = await self.ledger.notes(run.request.owner, self.name, wanted)
        placed = {positions[index]: note for index, note in found.items() if index in positions}
        run.notes = {**placed, **run.notes}  # a restored round's reasoning wins over its note

    def _key(self, call_id: str, owner: str) -> str:
        return owned(owner, f"{self.name}:{call_id}")  # a pipeline only ever continues its owner's own rounds

    async def _restore(self, conversation: list[LLMMessage], owner: str, run: DuetRun) -> tuple[list[LLMMessage], str | None, str]:
        """Puts back the hidden part of every tool round since the last user message (a follow-up
        may continue several), and what the upstream issued for its calls (into ``run``); returns the
        reasoning the latest of them was answered with (``None`` when no round was restored) and its
        retrieved context."""
        await self._recall_issued(conversation, owner, run)
        if not ends_with_tool_results(conversation):
            return conversation, None, ""
        reasoning: str | None = None
        grounding = ""
        for index in reversed(tool_rounds(conversation)):  # from the end, so earlier indices hold
            call_ids = [call.id for call in conversation[index].content]  # type: ignore[union-attr]
            try:
                continuation = await self.continuations.get((self._key(call_id, owner) for call_id in call_ids), across_failover=True)
            except StoreUnavailable:  # the store reports its outage once; this round goes on without it
                break
            if continuation is None:
                if any(DUET_CALL_ID.match(call_id) for call_id in call_ids):
                    logger.warning("no saved state for tool calls %s (expired, not saved during a store outage, or kept by "
                                   "another store or for another API key): continuing without the part of the round the "
                                   "client did not see", ", ".join(call_ids))
                continue
            conversation = splice(conversation, index, continuation)
            run.issued_calls.update(continuation.issued)
            reasoning = reasoning or continuation.reasoning
            grounding = grounding or continuation.grounding
        return conversation, reasoning, grounding

    async def _recall_issued(self, conversation: list[LLMMessage], owner: str, run: DuetRun) -> None:
        """What the upstream issued for the calls of the tool rounds before the last user message, into
        ``run`` (one store call): the answer model gets the same ids for a round on every later turn, so
        its prompt stays a byte prefix of the next (a provider's prompt cache hits)."""
        first_ids = _earlier_call_ids(conversation)
        if not first_ids:
            return
        try:
            found = await self.continuations.get_each([self._key(call_id, owner) for call_id in first_ids])
        except StoreUnavailable:  # reported once per outage; these rounds keep Duet's ids
            return
        for continuation in found:
            if continuation is not None:
                run.issued_calls.update(continuation.issued)

    async def _keep(self, turn: Sequence[LLMMessage], run: DuetRun, reasoning: str, grounding: str = "") -> bool:
        """Saves the hidden part of a round that ends with client tool calls, and what the upstream
        issued for its calls; False when it could not be kept."""
        if len(turn) < 2 or not isinstance(turn[-2], AssistantMessage) or not isinstance(turn[-1], FunctionExecutionResultMessage):
            return True  # nothing hidden to keep
        answered = {result.call_id for result in turn[-1].content}
        client_ids = [call.id for call in turn[-2].content if call.id not in answered]  # type: ignore[union-attr]
        continuation = Continuation(turn=list(turn), reasoning=reasoning, grounding=grounding,
                                    issued=issued_in(turn, run.issued_calls))
        owner = run.request.owner
        try:
            await self.continuations.put([self._key(i, owner) for i in client_ids], continuation)
        except StoreUnavailable:  # the store reports its outage once; the client still gets its calls, and Finished says so
            return False
        return True

    async def _settle(self, slot: TeamSlot, clean: bool) -> None:
        """Resets a team that finished cleanly and returns it to the pool; closes any other."""
        if clean:
            if await _reset(slot) and self._pool.release(slot):
                return
        elif isinstance(slot.runtime, LeanAgentRuntime):
            await slot.runtime.stop_after_handlers(SETTLE_TIMEOUT)
        elif slot.runtime is not None:
            # The runtime re-raises the failure the run already reported; nothing new to log.
            with contextlib.suppress(BaseException):
                await slot.runtime.stop()
        await slot.close()


class _Begun:
    """The first steps of a run taken in its caller's step (:meth:`Duet._begin_at_once`), or why they failed."""

    __slots__ = ("task", "slot", "error")

    def __init__(self) -> None:
        self.task: list[BaseChatMessage] = []
        self.slot: TeamSlot | None = None
        self.error: BaseException | None = None


def _earlier_call_ids(conversation: Sequence[LLMMessage]) -> list[str]:
    """The first call id of each tool round of Duet's before the last user message: what the upstream
    issued for them is recalled from the store (:meth:`Duet._recall_issued`)."""
    current = set(tool_rounds(conversation))
    return [message.content[0].id for index, message in enumerate(conversation)
            if index not in current and isinstance(message, AssistantMessage) and isinstance(message.content, list)
            and message.content and DUET_CALL_ID.match(message.content[0].id)]


async def _reset(slot: TeamSlot) -> bool:
    """Resets a team that finished cleanly, for reuse; False (logged) when it cannot be reset in time:
    a handler of the run that never ends must not hold the run's task, or its team, for ever."""
    try:
        async with asyncio.timeout(SETTLE_TIMEOUT):
            await reset_team(slot.team, slot.runtime)
    except Exception:  # a team that cannot reset is not reused
        logger.exception("closing a team that failed to reset")
        if slot.runtime is not None:
            for handler in list(slot.runtime._background_tasks):  # what still runs of the run (autogen-core 0.7.5's own set)
                handler.cancel()
        return False
    return True


def _restored_positions(sent: Sequence[LLMMessage], conversation: Sequence[LLMMessage], anchors: Mapping[int, object]) -> dict[int, int]:
    """Where each anchor of ``sent`` (a user message, or tool results) is in ``conversation``, the same
    messages with the hidden part of the rounds since the last user message put back: a user message
    keeps its index (nothing before it is spliced), tool results are found by a call id of theirs."""
    results_at = {result.call_id: index for index, message in enumerate(conversation)
                  if isinstance(message, FunctionExecutionResultMessage) for result in message.content}
    positions: dict[int, int] = {}
    for index in anchors:
        message = sent[index]
        if not isinstance(message, FunctionExecutionResultMessage):
            positions[index] = index
        elif message.content and message.content[0].call_id in results_at:
            positions[index] = results_at[message.content[0].call_id]
    return positions
