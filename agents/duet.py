"""Running the duet on one conversation: the code path the HTTP service and Python scripts share."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Sequence

from autogen_agentchat.base import Team
from autogen_core import CancellationToken, ComponentLoader, ComponentModel, SingleThreadedAgentRuntime
from autogen_core.models import AssistantMessage, ChatCompletionClient, FunctionExecutionResultMessage, LLMMessage
from autogen_core.tools import BaseTool
from pydantic import BaseModel

from duet.workbenches import DuetWorkbench, ProxyTool, RequestContext, ServiceTools, proxy_tools_from_openai

from .answer_agent import AnswerAgent, AnswerAgentConfig
from .base import workbench_from_config
from .continuations import (
    Continuation,
    ContinuationStore,
    GuardedStore,
    MemoryContinuationStore,
    StoreUnavailable,
    splice,
    tool_rounds,
)
from .conversation import DUET_CALL_ID, conversation_from_openai, ends_with_tool_results
from .errors import TeamLoadError
from .events import ContentDelta, DuetEvent, Failed, Finished, FinishReason, ReasoningDelta, ToolCall, ToolCallsRequested, Usage
from .legacy_providers import with_current_providers
from .messages import AnswerReply, ClientHandoff, ReasoningReply, read_reply, task_messages
from .model_client import ANSWER_MODEL_INFO
from .run_context import AnswerOptions, DuetRun, bind_run
from .runtime import LeanAgentRuntime
from .settings import REASONER_MODEL_INFO, PipelineSettings, ReasoningOutput
from .team import build_team

logger = logging.getLogger(__name__)

_END_KINDS = ("done", "error")


MAX_BUFFERED_EVENTS = 128
"""Events a run may get ahead of its reader before its agents wait for the reader (backpressure)."""

SETTLE_TIMEOUT = 5.0
"""Seconds the handlers of a cancelled or failed run get to end before they are cancelled."""


class _EventChannel:
    """Events from the agents to the caller. Collects what arrives while the caller is busy, so
    a burst is handed over (and written to the client) as one batch.

    Bounded: once ``capacity`` events wait, :meth:`emit` returns False and the agent awaits
    :meth:`room`, which returns when the caller has taken them (or the run is ending). A client
    that stops reading thus stops the agents, which stop reading their model's stream, whose
    server then stops writing: nothing piles up in between. While there is room, an event costs
    one append and no task or future."""

    __slots__ = ("_events", "_waiter", "_room", "_capacity", "_closed")

    def __init__(self, capacity: int = MAX_BUFFERED_EVENTS) -> None:
        self._events: list[DuetEvent] = []
        self._waiter: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._capacity = capacity
        self._closed = False

    def emit(self, event: DuetEvent) -> bool:
        """Queues ``event``; False when the caller is ``capacity`` events behind (await :meth:`room`)."""
        events = self._events
        events.append(event)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        return len(events) < self._capacity

    async def room(self) -> None:
        """Waits until the caller has taken the queued events, or the run is ending (:meth:`close`)."""
        while len(self._events) >= self._capacity and not self._closed:
            if self._room is None or self._room.done():
                self._room = asyncio.get_running_loop().create_future()
            await self._room

    def close(self) -> None:
        """The run is ending (cancelled, or its reader is gone): agents no longer wait for room."""
        self._closed = True
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    async def drain(self, timeout: float | None = None) -> list[DuetEvent]:
        """Everything emitted since the last call; waits for at least one event, or ``timeout``
        seconds (then returns an empty list)."""
        if not self._events:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(timeout, _wake, waiter) if timeout is not None else None
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
        events, self._events = self._events, []
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
        return events


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _stop_if_cancelled(token: CancellationToken) -> None:
    if token.is_cancelled():
        raise asyncio.CancelledError()


class DuetStream:
    """One run of the duet, in progress. Read it in batches (:meth:`next_batch`) or event by event
    (``async for``); :meth:`close` stops whatever still runs (every model and tool call)."""

    def __init__(self, channel: _EventChannel, driver: asyncio.Task[None], token: CancellationToken) -> None:
        self._channel = channel
        self._driver = driver
        self._token = token
        self._ended = False
        self._pending: list[DuetEvent] = []

    @property
    def ended(self) -> bool:
        """The final event (``Finished`` or ``Failed``) has been handed out."""
        return self._ended

    async def next_batch(self, timeout: float | None = None) -> list[DuetEvent]:
        """The events that arrived since the last batch (waiting for one if none did); an empty
        list after ``timeout`` seconds without events, or once the run has ended."""
        if self._ended:
            return []
        batch = await self._channel.drain(timeout)
        for index, event in enumerate(batch):
            if event.kind in _END_KINDS:
                self._ended = True
                return batch[: index + 1]
        return batch

    def __aiter__(self) -> "DuetStream":
        return self

    async def __anext__(self) -> DuetEvent:
        while not self._pending:
            if self._ended:
                raise StopAsyncIteration
            self._pending = await self.next_batch()
        return self._pending.pop(0)

    async def close(self) -> None:
        """Stops the run if it is still going. A run that has handed out its last event is only
        settling its team for reuse; that finishes on its own, off the caller's path."""
        if self._driver.done() or self._ended:
            return
        self._token.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._driver), timeout=10)
        except asyncio.TimeoutError:
            self._driver.cancel()
        except asyncio.CancelledError:  # the caller itself is being cancelled: stop the run, then let it go
            self._driver.cancel()
            raise


class DuetResult(BaseModel):
    """A whole run, collected: what a non-streaming caller gets."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: FinishReason = "stop"

    @classmethod
    def of(cls, events: Sequence[DuetEvent]) -> "DuetResult":
        """Collects a run's events. Where the answer model's thinking follows the reasoner's, the
        reasoning starts a new paragraph (as the HTTP stream does)."""
        result = cls()
        reasoning: list[str] = []
        content: list[str] = []
        source = ""
        for event in events:
            if isinstance(event, ReasoningDelta):
                if source and event.source != source:
                    reasoning.append("\n\n")
                source = event.source
                reasoning.append(event.text)
            elif isinstance(event, ContentDelta):
                content.append(event.text)
            elif isinstance(event, ToolCallsRequested):
                result.tool_calls.extend(event.calls)
            elif isinstance(event, Usage):
                result.prompt_tokens += event.prompt_tokens
                result.completion_tokens += event.completion_tokens
            elif isinstance(event, Finished):
                result.finish_reason = event.finish_reason
        result.reasoning = "".join(reasoning)
        result.content = "".join(content)
        return result


@dataclass(eq=False)
class TeamSlot:
    """A team and, unless it embeds its own, the runtime it runs on (started for each run).
    ``owns_agents``: the team's agents (and their model clients) were made for it alone, as when
    it is loaded from a team file, and close with it."""

    team: Team
    runtime: SingleThreadedAgentRuntime | None = None
    owns_agents: bool = False

    async def close(self) -> None:
        if self.owns_agents:
            # BaseGroupChat has no public accessor for its participants (AutoGen Studio reads it too).
            for agent in getattr(self.team, "_participants", []):
                with contextlib.suppress(Exception):
                    await agent.close()


class TeamPool:
    """Idle teams of one pipeline. AgentChat teams hold per-run state and refuse concurrent runs,
    so each request leases its own; a team that finished cleanly is reset and reused, which keeps
    its agents, their registrations on the runtime and their model clients alive."""

    def __init__(self, factory: Callable[[], TeamSlot], max_idle: int = 64) -> None:
        self._factory = factory
        self._idle: list[TeamSlot] = []
        self._max_idle = max_idle

    def acquire(self) -> TeamSlot:
        return self._idle.pop() if self._idle else self._factory()

    def release(self, slot: TeamSlot) -> bool:
        """Keeps ``slot`` for reuse; False when the pool is full (the caller closes it)."""
        if len(self._idle) >= self._max_idle:
            return False
        self._idle.append(slot)
        return True

    def drain(self) -> list[TeamSlot]:
        idle, self._idle = self._idle, []
        return idle


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

    def __init__(  # team_factory: pooled teams for runs; team_builder: standalone teams
        self,
        team_factory: Callable[[], TeamSlot],
        *,
        team_builder: Callable[[], Team],
        name: str = "duet",
        services: ServiceTools | None = None,
        reasoning_output: ReasoningOutput = "reasoning_content",
        model_clients: Sequence[ChatCompletionClient] = (),
        continuations: ContinuationStore | None = None,
        max_idle_teams: int = 64,
    ) -> None:
        self.name = name
        self.reasoning_output: ReasoningOutput = reasoning_output
        self.services = services or ServiceTools()
        store = continuations or MemoryContinuationStore()
        # Guarded whatever it is (a store passed in from Python, memory://): a fault or a hang costs a
        # round its hidden part, bounded and logged once per outage, never the request.
        self.continuations = store if isinstance(store, GuardedStore) else GuardedStore(store)
        self._team_builder = team_builder  # fresh teams on an embedded runtime, for new_team()
        self._pool = TeamPool(team_factory, max_idle_teams)
        self._model_clients = list(model_clients)

    @classmethod
    def from_settings(cls, settings: PipelineSettings, *, continuations: ContinuationStore | None = None) -> "Duet":
        """Creates the pipeline's model clients and service tools once; every team it runs shares them."""
        answer_client = settings.answer.build_client(ANSWER_MODEL_INFO)
        reasoner_client = settings.reasoner.build_client(REASONER_MODEL_INFO) if settings.reasoner else None
        clients = [c for c in (answer_client, reasoner_client) if c is not None]

        def factory() -> TeamSlot:
            runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
            return TeamSlot(build_team(settings, answer_client, reasoner_client, runtime=runtime), runtime)

        return cls(
            factory,
            team_builder=lambda: build_team(settings, answer_client, reasoner_client),
            name=settings.name,
            services=ServiceTools.from_settings(settings.tools),
            reasoning_output=settings.reasoning_output,
            model_clients=clients,
            continuations=continuations,
        )

    @classmethod
    def from_team(
        cls,
        team: ComponentModel | Mapping[str, Any] | str | Path,
        *,
        name: str = "duet",
        reasoning_output: ReasoningOutput = "reasoning_content",
        continuations: ContinuationStore | None = None,
    ) -> "Duet":
        """Serves a team component (a dict, a ``ComponentModel`` or a JSON file path), e.g. one
        exported by ``duet export-team`` or edited in AutoGen Studio.

        The team is loaded once here, so a broken file fails at startup, naming the provider
        that could not be loaded. The client tools of each request join the team's service tools
        (the non-client tools of its answer agent).
        """
        config = load_team_config(team)
        prototype = load_team(config, origin=str(team) if isinstance(team, (str, Path)) else "component")
        spare = [prototype]

        def factory() -> TeamSlot:
            return TeamSlot(spare.pop() if spare else Team.load_component(config), owns_agents=True)

        return cls(factory, name=name, services=ServiceTools(_service_tools_of(config)), reasoning_output=reasoning_output,
                   continuations=continuations, team_builder=lambda: Team.load_component(config))

    @property
    def model_clients(self) -> list[ChatCompletionClient]:
        """The model clients this pipeline created (readiness probes ask their servers)."""
        return list(self._model_clients)

    @property
    def service_tool_names(self) -> set[str]:
        return {tool.name for tool in self.services.tools}

    async def open(self) -> "Duet":
        """Starts what runs beside the pipeline (its MCP servers). Raises if one cannot start."""
        await self.services.open()
        return self

    async def close(self) -> None:
        """Stops the MCP servers and closes the model clients this pipeline created."""
        await self.services.close()
        for slot in self._pool.drain():
            await slot.close()
        for client in self._model_clients:
            await client.close()

    async def __aenter__(self) -> "Duet":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def new_team(self) -> Team:
        """A fresh team of this pipeline, on its own embedded runtime: run it with AgentChat
        directly (``await team.run(task=...)``) or dump it. Its agents share the pipeline's model
        clients: close the pipeline, not the agents."""
        return self._team_builder()

    def start(
        self,
        messages: Sequence[Mapping[str, Any]] | Sequence[LLMMessage],
        *,
        tools: Sequence[Mapping[str, Any]] | Sequence[ProxyTool] = (),
        options: AnswerOptions | None = None,
        request_id: str | None = None,
        user: str | None = None,
        cancellation_token: CancellationToken | None = None,
    ) -> DuetStream:
        """Starts one run of the duet (call from a coroutine) and returns it at once.

        ``messages`` is an OpenAI ``messages`` list (or AutoGen ``LLMMessage`` objects); ``tools``
        an OpenAI ``tools`` list (or :class:`ProxyTool` objects). The run binds the request
        (event sink, the request's workbench, the answer options) and runs a leased team on its
        runtime; cancelling ``cancellation_token`` or closing the stream stops it. The run keeps
        pace with its reader: once :data:`MAX_BUFFERED_EVENTS` events wait unread, the agents stop
        reading their models' streams until the reader catches up (or closes the stream). A token
        cancelled before the run starts ends it at once with ``Failed``, before any model is called.
        """
        if messages and isinstance(messages[0], Mapping):
            conversation = conversation_from_openai(messages)  # type: ignore[arg-type]
        else:
            conversation = list(messages)  # type: ignore[arg-type]
        if all(isinstance(tool, ProxyTool) for tool in tools):
            client_tools: list[ProxyTool] = list(tools)  # type: ignore[arg-type]
        else:
            client_tools = proxy_tools_from_openai(tools)  # type: ignore[arg-type]
        channel = _EventChannel()
        request = RequestContext(request_id=request_id or uuid.uuid4().hex, user=user, pipeline=self.name)
        run = DuetRun(
            emit=channel.emit,
            room=channel.room,
            workbench=DuetWorkbench.for_request(self.services.tools, client_tools, request=request),
            options=options or AnswerOptions(),
            request=request,
        )
        token = cancellation_token or CancellationToken()
        token.add_callback(channel.close)  # a cancelled run's agents must not wait for a reader
        return DuetStream(channel, asyncio.create_task(self._drive(conversation, run, token)), token)

    async def stream(
        self, messages: Sequence[Mapping[str, Any]] | Sequence[LLMMessage], **kwargs: Any
    ) -> AsyncIterator[DuetEvent]:
        """Runs the duet once, yielding :mod:`duet.agents.events` until ``Finished`` or ``Failed``.
        Takes the arguments of :meth:`start`; leaving the loop early stops the run."""
        run = self.start(messages, **kwargs)
        try:
            async for event in run:
                yield event
        finally:
            await run.close()

    async def run(self, messages: Sequence[Mapping[str, Any]] | Sequence[LLMMessage], **kwargs: Any) -> DuetResult:
        """Like :meth:`stream`, collected into one :class:`DuetResult`. Raises the run's error."""
        events = [event async for event in self.stream(messages, **kwargs)]
        if isinstance(events[-1], Failed):
            raise events[-1].error
        return DuetResult.of(events)

    async def _drive(self, conversation: list[LLMMessage], run: DuetRun, token: CancellationToken) -> None:
        with bind_run(run):  # the team's runtime is started inside: its tasks inherit the binding
            slot: TeamSlot | None = None
            clean = False
            try:
                _stop_if_cancelled(token)  # the client left before the run started: no store call, no model call
                conversation, earlier_reasoning = await self._restore(conversation)
                task = task_messages(conversation, earlier_reasoning)
                _stop_if_cancelled(token)
                slot = self._pool.acquire()
                if slot.runtime is not None:
                    slot.runtime.start()
                finish_reason: FinishReason = "stop"
                reasoning: list[str] = []
                async for message in slot.team.run_stream(task=task, cancellation_token=token, output_task_messages=False):
                    reply = read_reply(message)
                    if isinstance(reply, ReasoningReply):
                        if reply.text:
                            reasoning.append(reply.text)
                    elif isinstance(reply, ClientHandoff):
                        finish_reason = "tool_calls"
                        await self._keep(reply.turn, "\n\n".join(reasoning) or earlier_reasoning)
                    elif isinstance(reply, AnswerReply):
                        finish_reason = reply.finish_reason
                    # A FailureReply: the agent already sent Failed; the team ended cleanly and can be reused.
                run.emit(Finished(finish_reason=finish_reason))
                clean = True
            except asyncio.CancelledError as exc:
                run.emit(Failed(message="the run was cancelled", error=exc))  # ends the stream of whoever still reads it
                if not token.is_cancelled():
                    raise
            except Exception as exc:  # an agent already reported its own failure; this covers the rest
                run.emit(Failed(message=str(exc), error=exc))
            finally:
                if slot is not None:
                    if not clean:
                        token.cancel()  # whatever of the run still goes on stops at its next await
                    await self._settle(slot, clean)

    def _key(self, call_id: str) -> str:
        return f"{self.name}:{call_id}"  # a pipeline only ever continues its own rounds

    async def _restore(self, conversation: list[LLMMessage]) -> tuple[list[LLMMessage], str]:
        """Puts back the hidden part of every tool round since the last user message (a follow-up
        may continue several), and returns the reasoning the latest of them was answered with."""
        if not ends_with_tool_results(conversation):
            return conversation, ""
        reasoning = ""
        for index in reversed(tool_rounds(conversation)):  # from the end, so earlier indices hold
            call_ids = [call.id for call in conversation[index].content]  # type: ignore[union-attr]
            try:
                continuation = await self.continuations.get(self._key(call_id) for call_id in call_ids)
            except StoreUnavailable:  # the store reports its outage once; this round goes on without it
                break
            if continuation is None:
                if any(DUET_CALL_ID.match(call_id) for call_id in call_ids):
                    logger.warning("no saved state for tool calls %s (expired, or another store): continuing without "
                                   "the part of the round the client did not see", ", ".join(call_ids))
                continue
            conversation = splice(conversation, index, continuation)
            reasoning = reasoning or continuation.reasoning
        return conversation, reasoning

    async def _keep(self, turn: Sequence[LLMMessage], reasoning: str) -> None:
        """Saves the hidden part of a round that ends with client tool calls."""
        if len(turn) < 2 or not isinstance(turn[-2], AssistantMessage) or not isinstance(turn[-1], FunctionExecutionResultMessage):
            return
        answered = {result.call_id for result in turn[-1].content}
        client_ids = [call.id for call in turn[-2].content if call.id not in answered]  # type: ignore[union-attr]
        try:
            await self.continuations.put([self._key(i) for i in client_ids], Continuation(turn=list(turn), reasoning=reasoning))
        except StoreUnavailable:  # the store reports its outage once; the client still gets its calls
            pass

    async def _settle(self, slot: TeamSlot, clean: bool) -> None:
        """Resets a team that finished cleanly and returns it to the pool; closes any other."""
        if clean:
            try:
                await slot.team.reset()
                if slot.runtime is not None:
                    await slot.runtime.stop_when_idle()
            except Exception:  # a team that cannot reset is not reused
                logger.exception("closing a team that failed to reset")
            else:
                if self._pool.release(slot):
                    return
        elif isinstance(slot.runtime, LeanAgentRuntime):
            await slot.runtime.stop_after_handlers(SETTLE_TIMEOUT)
        elif slot.runtime is not None:
            # The runtime re-raises the failure the run already reported; nothing new to log.
            with contextlib.suppress(BaseException):
                await slot.runtime.stop()
        await slot.close()


def load_team_config(team: ComponentModel | Mapping[str, Any] | str | Path) -> ComponentModel:
    """A team component from a ``ComponentModel``, a dict, or the path of a JSON file; providers
    under Duet's old top-level names (``agents.ReasoningAgent``) are renamed, with a warning."""
    if isinstance(team, ComponentModel):
        team = team.model_dump()
    if isinstance(team, (str, Path)):
        try:
            team = json.loads(Path(team).read_text())
        except (OSError, ValueError) as exc:
            raise TeamLoadError(f"cannot read team file {team}: {exc}") from exc
    try:
        return ComponentModel.model_validate(with_current_providers(team))
    except ValueError as exc:
        raise TeamLoadError(f"not a component: {exc}") from exc


def load_team(config: ComponentModel, origin: str = "component") -> Team:
    """Loads a team; on failure the error names the provider path that broke."""
    try:
        return Team.load_component(config)
    except Exception as exc:
        raise TeamLoadError(f"cannot load team {origin}: {_diagnose(config, exc)}") from exc


def _components(node: Any) -> Iterator[dict[str, Any]]:
    """Every component in a dumped tree, innermost first."""
    if isinstance(node, dict):
        for value in node.values():
            yield from _components(value)
        if "provider" in node and "config" in node:
            yield node
    elif isinstance(node, list):
        for item in node:
            yield from _components(item)


def _diagnose(config: ComponentModel, error: Exception) -> str:
    tree = config.model_dump()
    for component in _components(tree):
        module_path, _, class_name = component["provider"].rpartition(".")
        try:
            getattr(importlib.import_module(module_path), class_name)
        except Exception as exc:  # noqa: BLE001 - the report is the point
            return f"provider '{component['provider']}' ({component.get('component_type')}) cannot be imported: {exc}"
    for component in _components(tree):
        try:
            ComponentLoader.load_component(component)
        except Exception as exc:  # noqa: BLE001
            return f"provider '{component['provider']}' ({component.get('component_type')}) failed to load: {type(exc).__name__}: {exc}"
    return f"{type(error).__name__}: {error}"


def _service_tools_of(team: ComponentModel) -> list[BaseTool[Any, Any]]:
    """The tools a served team file brings itself: its answer agent's non-client tools, loaded
    once for the pipeline (client tools come from each request instead)."""
    for participant in team.config.get("participants", []):
        if ComponentModel.model_validate(participant).provider == AnswerAgent.component_provider_override:
            workbench = workbench_from_config(AnswerAgentConfig.model_validate(participant["config"]))
            if isinstance(workbench, DuetWorkbench):
                return workbench.service_tools
    return []
