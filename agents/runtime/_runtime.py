"""The AutoGen runtime Duet's served teams run on: :class:`LeanAgentRuntime`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import types
import logging
import os
from collections import abc
from typing import Any, Callable, Coroutine, Generator, Sequence

from autogen_core import (
    EVENT_LOGGER_NAME,
    ROOT_LOGGER_NAME,
    Agent,
    AgentId,
    AgentInstantiationContext,
    AgentType,
    CancellationToken,
    MessageContext,
    SingleThreadedAgentRuntime,
    Subscription,
    TopicId,
)
from autogen_core._serialization import MessageSerializer, SerializationRegistry
from autogen_core._single_threaded_agent_runtime import PublishMessageEnvelope, SendMessageEnvelope
from autogen_core._telemetry import EnvelopeMetadata, get_telemetry_envelope_metadata
from autogen_core.logging import AgentConstructionExceptionEvent, DeliveryStage, MessageEvent, MessageKind

from duet.agents._ids import new_message_id
from duet.agents.runtime._agents import AgentFactory, deliver, lighten_agent
from duet.agents.runtime._loop import LeanRunContext, new_message_queue
from duet.agents.runtime._queues import unbind_finished
from duet.agents.runtime._subscriptions import SubscriptionsWithoutCache, lean_subscription

_logger = logging.getLogger(ROOT_LOGGER_NAME)  # where the stock runtime writes its INFO lines
_event_logger = logging.getLogger(EVENT_LOGGER_NAME)

_NO_SPAN = contextlib.nullcontext()  # reusable: one object for every block


class _NoSpans:
    """Stands in for the runtime's trace helper when runtime tracing is disabled."""

    def trace_block(self, *args: Any, **kwargs: Any) -> contextlib.nullcontext[None]:
        return _NO_SPAN


MAX_LISTS_REMEMBERED = 256  # serializer lists known to be added (a team of Duet's hands the same 22 each time)


class _KnownSerializers(SerializationRegistry):
    """The message serializers of every lean runtime in the process, by type name and content type.
    The stock runtime keeps a registry of its own, and each team adds a serializer for each message
    type its agents handle to it when it first runs (about 1.5 KB a team); the first one added for
    a type is kept. A single-process runtime only uses them to write its event log."""

    def __init__(self) -> None:
        super().__init__()
        # Lists added whole, by id, each kept (an id is not reused while its object lives): Duet's agent classes
        # hand the same lists at every team's first run (they find their handlers once), so one is added once.
        self._lists_added: dict[int, object] = {}

    def add_serializer(self, serializer: MessageSerializer[Any] | Sequence[MessageSerializer[Any]]) -> None:
        if self._lists_added.get(id(serializer)) is serializer:
            return
        if isinstance(serializer, abc.Sequence):
            for one in serializer:
                self.add_serializer(one)
            if len(self._lists_added) >= MAX_LISTS_REMEMBERED:  # (new lists each time, a stock team's): begun again
                self._lists_added.clear()
            self._lists_added[id(serializer)] = serializer
        elif (serializer.type_name, serializer.data_content_type) not in self._serializers:
            self._serializers[(serializer.type_name, serializer.data_content_type)] = serializer


_KNOWN_SERIALIZERS = _KnownSerializers()


def _log_sent(runtime: SingleThreadedAgentRuntime, message: Any, sender: AgentId | None, receiver: AgentId | TopicId,
              kind: MessageKind) -> None:
    """The event log's line for a message sent or published, as the stock runtime writes it, when
    a handler listens at INFO."""
    if _event_logger.isEnabledFor(logging.INFO):
        _event_logger.info(MessageEvent(payload=runtime._try_serialize(message), sender=sender, receiver=receiver,
                                        kind=kind, delivery_stage=DeliveryStage.SEND))


@types.coroutine
def _resumed(handler: Coroutine[Any, Any, None], waiting_on: Any) -> Generator[Any, Any, None]:
    """The rest of ``handler``, already run up to a wait on ``waiting_on`` (what its first step yielded),
    driven by a task as ``await`` would drive it: what the task sends or throws in goes on to it."""
    while True:
        try:
            sent = yield waiting_on
        except BaseException as exc:  # noqa: BLE001 - a cancellation or error thrown in goes on to the handler
            try:
                waiting_on = handler.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting_on = handler.send(sent)
            except StopIteration:
                return


class LeanAgentRuntime(SingleThreadedAgentRuntime):
    """``SingleThreadedAgentRuntime`` without the work nobody asked for.

    For every message it delivers, the stock runtime serialises the message to JSON for its event
    logger (even with no handler attached) and opens OpenTelemetry spans (no-op spans when
    ``AUTOGEN_DISABLE_RUNTIME_TRACING=true``, but still built). A two-agent team run sends about a
    dozen messages; skipping both halves the team's CPU time per request (``bench/``). And for every
    message sent or published it formats an INFO line with an f-string, the ``repr`` of the whole
    message (the conversation, in Duet's task), before the logger decides to drop it: that is
    skipped too unless the ``autogen_core`` logger is enabled for INFO (a 200-message conversation
    spent a fifth of its CPU there). The event log is still written when a handler listens at INFO,
    the INFO lines still formatted when INFO is enabled, and spans still opened unless runtime
    tracing is disabled. Message ids are unique and UUID-shaped as AutoGen asks, but counted from
    a random base instead of drawn from the OS for each message (:func:`~duet.agents._ids.new_message_id`).

    What it keeps is lighter: the agents it makes share what AgentChat would copy into each
    (:func:`~duet.agents.runtime._agents.lighten_agent`), autogen-core's subscriptions are kept as
    their lean kind (:func:`~duet.agents.runtime._subscriptions.lean_subscription`) and no topic's
    recipients are cached, every lean runtime shares one registry of message serializers, a run's
    stop signal is a flag, and its message queue makes no deque it does not use
    (:func:`~duet.agents.runtime.lighten_queue`): a pipeline keeps a team, and so a runtime and its
    agents, for every request in flight.

    While nobody reads any of it (no INFO logging, no event log, no spans, no intervention
    handler: :meth:`_unobserved`), delivering a message skips the rest of that bookkeeping too:
    no telemetry envelope, no span attributes (the stock runtime builds them, the message's JSON
    included, even for no-op spans), no log lines, and no trip through the queue: a message goes
    to its handler's task at once (:meth:`_delivers_at_once`). A direct message's reply resolves its sender's
    future at once instead of making a second trip through the queue and a task of its own, and a
    message published to one recipient is handled in the publishing task instead of a task more.
    Relies on autogen-core 0.7.5 internals (pinned).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._serialization_registry = _KNOWN_SERIALIZERS
        self._subscription_manager = SubscriptionsWithoutCache()
        self._message_queue = new_message_queue(self)
        self._spans = os.environ.get("AUTOGEN_DISABLE_RUNTIME_TRACING") != "true"
        if not self._spans:
            self._tracer_helper = _NoSpans()  # type: ignore[assignment]
        self._unobserved_in_run: bool | None = None  # read once a run (start()); None while stopped

    def _unobserved(self) -> bool:
        """Nothing reads the runtime's logs, event log or spans, and no handler intervenes. Read once
        when a run starts (a run asks for every message it delivers: ~40 logger checks a request) and
        kept until it stops: a logging level changed while a run goes on applies from the next run."""
        unobserved = self._unobserved_in_run
        return self._nobody_watches() if unobserved is None else unobserved

    def _nobody_watches(self) -> bool:
        return not (self._spans or self._intervention_handlers or _logger.isEnabledFor(logging.INFO)
                    or _event_logger.isEnabledFor(logging.INFO))

    def _envelope_metadata(self) -> EnvelopeMetadata | None:
        return get_telemetry_envelope_metadata() if self._spans else None  # only spans read it

    def _try_serialize(self, message: Any) -> str:
        if not _event_logger.isEnabledFor(logging.INFO):
            return ""
        return super()._try_serialize(message)

    def start(self) -> None:
        if self._run_context is not None:
            raise RuntimeError("Runtime is already started")  # as the stock runtime
        self._unobserved_in_run = self._nobody_watches()
        self._run_context = LeanRunContext(self)

    async def stop(self) -> None:
        await self._stop(idle=False)

    async def stop_when_idle(self) -> None:
        await self._stop(idle=True)

    async def _stop(self, *, idle: bool) -> None:
        """Mirrors SingleThreadedAgentRuntime.stop and stop_when_idle of autogen-core 0.7.5 (pinned), which
        make a new message queue each time (two, with the one Duet makes instead): a run whose messages all
        went to their handlers at once leaves its queue as new (:meth:`LeanRunContext.left_clean`), and
        the next run takes it; any other gets a new one. A pooled team's runtime stops after every request."""
        run_context = self._run_context
        if run_context is None:
            raise RuntimeError("Runtime is not started")  # as the stock runtime
        clean = False
        try:
            if idle:
                await run_context.stop_when_idle()
            else:
                await run_context.stop()
            clean = run_context.left_clean()  # type: ignore[attr-defined]
        finally:
            self._run_context = None
            if not clean:
                self._message_queue = new_message_queue(self)
            else:
                unbind_finished(self._message_queue)  # the next run may be on another event loop
            self._unobserved_in_run = None

    async def stop_when(self, condition: Callable[[], bool]) -> None:
        """As the stock runtime's, with a lean message queue for the next run (the stock one makes a plain
        queue, which would never start :class:`LeanRunContext`'s loop)."""
        try:
            await super().stop_when(condition)
        finally:
            self._message_queue = new_message_queue(self)
            self._unobserved_in_run = None

    async def add_subscription(self, subscription: Subscription) -> None:
        await super().add_subscription(lean_subscription(subscription))

    async def register_factory(
        self, type: str | AgentType, agent_factory: Callable[[], Any], *, expected_class: type[Any] | None = None
    ) -> AgentType:
        if isinstance(type, str):
            type = AgentType(type)
        if type.type in self._agent_factories:
            raise ValueError(f"Agent with type {type} already exists.")  # as the stock runtime
        self._agent_factories[type.type] = AgentFactory(agent_factory, expected_class)
        return type

    async def _invoke_agent_factory(self, agent_factory: Callable[..., Any], agent_id: AgentId) -> Any:
        if not isinstance(agent_factory, AgentFactory):
            agent = await super()._invoke_agent_factory(agent_factory, agent_id)
        else:  # as the stock runtime calls the wrapper it registers
            with AgentInstantiationContext.populate_context((self, agent_id)):
                try:
                    agent = agent_factory.make()
                    if inspect.isawaitable(agent):
                        agent = await agent
                    expected = agent_factory.expected_class
                    if expected is not None and not issubclass(type(agent), expected):
                        raise ValueError(f"Factory registered using the wrong type: expected {expected.__name__}, "
                                         f"got {type(agent).__name__}")
                except BaseException as exc:
                    _event_logger.info(AgentConstructionExceptionEvent(agent_id=agent_id, exception=exc))
                    _logger.error(f"Error constructing agent {agent_id}", exc_info=True)
                    raise
        lighten_agent(agent)
        return agent

    async def send_message(
        self,
        message: Any,
        recipient: AgentId,
        *,
        sender: AgentId | None = None,
        cancellation_token: CancellationToken | None = None,
        message_id: str | None = None,
    ) -> Any:
        if message_id is None:
            message_id = new_message_id()
        if _logger.isEnabledFor(logging.INFO):
            return await super().send_message(
                message, recipient, sender=sender, cancellation_token=cancellation_token, message_id=message_id
            )
        # Mirrors SingleThreadedAgentRuntime.send_message of autogen-core 0.7.5 (pinned), without the
        # INFO line nobody logs.
        if cancellation_token is None:
            cancellation_token = CancellationToken()
        _log_sent(self, message, sender, recipient, MessageKind.DIRECT)
        with self._tracer_helper.trace_block(
            "create", recipient, parent=None, extraAttributes={"message_type": type(message).__name__}
        ):
            future = asyncio.get_event_loop().create_future()
            if recipient.type not in self._known_agent_names:
                future.set_exception(Exception("Recipient not found"))
                return await future
            envelope = SendMessageEnvelope(
                message=message,
                recipient=recipient,
                future=future,
                cancellation_token=cancellation_token,
                sender=sender,
                metadata=self._envelope_metadata(),
                message_id=message_id,
            )
            if self._delivers_at_once():
                self._start_handler(self._process_send(envelope))
            else:
                await self._message_queue.put(envelope)
            cancellation_token.link_future(future)
            return await future

    async def publish_message(
        self,
        message: Any,
        topic_id: TopicId,
        *,
        sender: AgentId | None = None,
        cancellation_token: CancellationToken | None = None,
        message_id: str | None = None,
    ) -> None:
        if self._delivers_at_once():  # unobserved: no log line, no event log, no span
            await self._publish_at_once(message, topic_id, sender, cancellation_token, message_id)
            return
        if message_id is None:
            message_id = new_message_id()
        if _logger.isEnabledFor(logging.INFO):
            await super().publish_message(
                message, topic_id, sender=sender, cancellation_token=cancellation_token, message_id=message_id
            )
            return
        # Mirrors SingleThreadedAgentRuntime.publish_message of autogen-core 0.7.5 (pinned), without
        # the INFO line nobody logs.
        with self._tracer_helper.trace_block(
            "create", topic_id, parent=None, extraAttributes={"message_type": type(message).__name__}
        ):
            if cancellation_token is None:
                cancellation_token = CancellationToken()
            _log_sent(self, message, sender, topic_id, MessageKind.PUBLISH)
            envelope = PublishMessageEnvelope(
                message=message,
                cancellation_token=cancellation_token,
                sender=sender,
                topic_id=topic_id,
                metadata=self._envelope_metadata(),
                message_id=message_id,
            )
            if self._delivers_at_once():
                self._start_handler(self._process_publish(envelope))
            else:
                await self._message_queue.put(envelope)

    def _delivers_at_once(self) -> bool:
        """Whether a message goes straight to its handler's task instead of through the queue: while
        the runtime runs, nothing observes it, no failure waits to be raised, and nothing is queued
        (so messages still start in the order they were sent)."""
        queue = self._message_queue
        unobserved = self._unobserved_in_run  # set while a run goes on (the run context is set)
        return (self._run_context is not None and self._background_exception is None and not queue._queue  # type: ignore[attr-defined]
                and not queue._is_shutdown and (self._unobserved() if unobserved is None else unobserved))  # type: ignore[attr-defined]

    async def _publish_at_once(self, message: Any, topic_id: TopicId, sender: AgentId | None,
                               cancellation_token: CancellationToken | None, message_id: str | None) -> None:
        """Delivers a published message as :meth:`_process_publish` does: a handler task for each
        recipient, started in their order (``_process_publish`` is a task that gathers a task for
        each), and no task at all for a message nobody but its sender subscribes to (the group chat
        manager's log of a run's start and end). A recipient's agent not made yet is made here, before
        any handler starts (``_process_publish`` makes it in its task, before it gathers): so a message
        published next, to a recipient of this one, is handled after this one, as the group chat
        manager expects. An agent that cannot be made fails the run as it fails ``_process_publish``."""
        agents = []
        try:
            for agent_type, key in self._subscription_manager.recipients_now(topic_id):  # type: ignore[attr-defined]
                if sender is not None and sender._type == agent_type and sender._key == key:
                    continue  # not back to the sender (AgentId's own fields: its __eq__ compares them)
                agent = self._made_agent(agent_type, key)
                agents.append(agent if agent is not None else await self._get_agent(AgentId(agent_type, key)))
        except asyncio.CancelledError:
            raise  # the publisher was cancelled while an agent was made: it is told, nothing is delivered
        except BaseException as exc:  # noqa: BLE001 - kept for the runtime's stop, as in SingleThreadedAgentRuntime
            if not self._ignore_unhandled_handler_exceptions:
                self._background_exception = exc
            return
        if not agents:
            return  # nobody to tell: no token, no message id
        if cancellation_token is None:
            cancellation_token = CancellationToken()
        if message_id is None:
            message_id = new_message_id()
        alone: bool | None = None  # no handler under way or waiting to start but the caller's: read when needed
        kind = type(message)
        for agent in agents:
            context = MessageContext(sender=sender, topic_id=topic_id, is_rpc=False,
                                     cancellation_token=cancellation_token,
                                     message_id=message_id)
            handler = self._handle_published(agent, message, context)
            try:  # the class only notes such a message down (its _noted_at_once: see noted_at_once), its lock free
                noted = kind in agent._noted_at_once and not agent._fifo_lock._locked  # type: ignore[attr-defined]
            except AttributeError:  # any other agent
                noted = False
            if noted:
                if alone is None:  # before any task of this message is started: none overtakes another's message
                    handlers = self._background_tasks
                    alone = not handlers or (len(handlers) == 1 and asyncio.current_task() in handlers)
                if alone:
                    self._start_eagerly(handler)
                    continue
            self._start_handler(handler)

    def _made_agent(self, agent_type: str, key: str) -> Agent | None:
        """The agent of that type and key if it is made (a team's runtime holds a few: compared field
        by field, without an ``AgentId``, which checks its type against a pattern)."""
        made = self._instantiated_agents
        if len(made) > 8:  # a runtime many teams share: the dict finds it
            probe = AgentId.__new__(AgentId)
            probe._type, probe._key = agent_type, key
            return made.get(probe)
        for agent_id, agent in made.items():
            if agent_id._type == agent_type and agent_id._key == key:
                return agent
        return None

    async def _handle_published(self, agent: Agent, message: Any, context: MessageContext) -> None:
        """One recipient's delivery of a published message, in a handler task of its own, failing as a
        delivery of ``_process_publish`` fails: kept for the runtime's stop."""
        try:
            await deliver(agent, message, context, published=True)
        except BaseException as exc:  # noqa: BLE001 - kept for the runtime's stop, as in SingleThreadedAgentRuntime
            if not self._ignore_unhandled_handler_exceptions:
                self._background_exception = exc
        finally:
            self._message_queue.task_done()

    def _start_handler(self, handler: Coroutine[Any, Any, None]) -> None:
        """Runs ``handler`` (which ends with ``task_done()``) in a task of its own, as the message loop
        would after taking its message from the queue, but without the loop's two turns per message
        (waking on the queue, then ``sleep(0)``). Counted as an unfinished queue item, so
        ``stop_when_idle`` waits for it."""
        queue = self._message_queue
        queue._unfinished_tasks += 1  # type: ignore[attr-defined]  # autogen-core's Queue's own
        queue._finished._value = False  # type: ignore[attr-defined]  # its asyncio.Event's clear()
        task = asyncio.get_running_loop().create_task(handler)
        self._background_tasks.add(task)
        task.add_done_callback(self._handler_done)

    def _start_eagerly(self, handler: Coroutine[Any, Any, None]) -> None:
        """Runs ``handler`` (as :meth:`_start_handler` takes it) in the caller's step, in a copy of its
        context as a task's (what asyncio's eager tasks do from Python 3.12), for a handler that only
        notes a message down (:func:`~duet.agents.runtime._agents.notes_at_once`): it ends in that
        step, without the task, its callback and a pass of the event loop a handler task costs (six
        of a two-agent run's ten deliveries). A handler that waits after all goes on in a task of its
        own from where it waits, counted as :meth:`_start_handler` counts it."""
        queue = self._message_queue
        queue._unfinished_tasks += 1  # type: ignore[attr-defined]  # autogen-core's Queue's own
        queue._finished._value = False  # type: ignore[attr-defined]  # its asyncio.Event's clear()
        context = contextvars.copy_context()
        try:
            waiting_on = context.run(handler.send, None)
        except StopIteration:
            return  # done: _handle_published called task_done()
        task = asyncio.get_running_loop().create_task(_resumed(handler, waiting_on), context=context)
        self._background_tasks.add(task)
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[Any]) -> None:
        handlers = self._background_tasks
        handlers.discard(task)
        if not handlers:
            handlers.clear()  # a set keeps the table it grew to until cleared (~0.5 KB a runtime past four handlers)

    async def _process_send(self, message_envelope: SendMessageEnvelope) -> None:
        if not self._unobserved():
            await super()._process_send(message_envelope)
            return
        # Mirrors SingleThreadedAgentRuntime._process_send of autogen-core 0.7.5 (pinned) without the
        # bookkeeping nobody reads; the reply goes to the sender's future here, not through the queue.
        recipient = message_envelope.recipient
        future = message_envelope.future
        if recipient.type not in self._known_agent_names:
            raise LookupError(f"Agent type '{recipient.type}' does not exist.")
        try:
            agent = await self._get_agent(recipient)
            context = MessageContext(
                sender=message_envelope.sender,
                topic_id=None,
                is_rpc=True,
                cancellation_token=message_envelope.cancellation_token,
                message_id=message_envelope.message_id,
            )
            response = await deliver(agent, message_envelope.message, context, published=False)
        except BaseException as exc:  # noqa: BLE001 - the sender's future gets it, as in SingleThreadedAgentRuntime
            if not future.done():
                future.set_exception(exc)
            return
        finally:
            self._message_queue.task_done()
        if not future.done():
            future.set_result(response)

    async def _process_publish(self, message_envelope: PublishMessageEnvelope) -> None:
        if not self._unobserved():
            await super()._process_publish(message_envelope)
            return
        # Mirrors SingleThreadedAgentRuntime._process_publish of autogen-core 0.7.5 (pinned) without the
        # bookkeeping nobody reads; one recipient's handler runs in this task (gather makes a task per recipient).
        try:
            deliveries = []
            for agent_id in await self._subscription_manager.get_subscribed_recipients(message_envelope.topic_id):
                if message_envelope.sender is not None and agent_id == message_envelope.sender:
                    continue  # not back to the sender
                context = MessageContext(
                    sender=message_envelope.sender,
                    topic_id=message_envelope.topic_id,
                    is_rpc=False,
                    cancellation_token=message_envelope.cancellation_token,
                    message_id=message_envelope.message_id,
                )
                deliveries.append(deliver(await self._get_agent(agent_id), message_envelope.message, context, published=True))
            if len(deliveries) == 1:
                await deliveries[0]
            elif deliveries:
                await asyncio.gather(*deliveries)
        except BaseException as exc:  # noqa: BLE001 - kept for the runtime's stop, as in SingleThreadedAgentRuntime
            if not self._ignore_unhandled_handler_exceptions:
                self._background_exception = exc
        finally:
            self._message_queue.task_done()

    async def stop_after_handlers(self, timeout: float) -> None:
        """Stops the message loop of a run that was cancelled or failed, once its handlers have ended.

        The stock ``stop()`` replaces the message queue at once; a handler of the run that is still
        running then calls ``task_done()`` on the new queue when it ends, which raises, and asyncio
        logs "Task exception was never retrieved" for it. Here the handlers (whose run token is
        cancelled, so they end at their next await) get ``timeout`` seconds to end and are cancelled
        after that; the loop is stopped only when none runs and nothing is queued.
        """
        if self._run_context is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        handlers: set[asyncio.Task[Any]] = set()
        try:
            while True:
                running = set(self._background_tasks)
                queued = not self._message_queue.empty() and self._run_context.loop_running  # type: ignore[attr-defined]
                handlers |= running
                left = deadline - loop.time()
                if not (running or queued) or left <= 0:
                    break
                if running:
                    await asyncio.wait(running, timeout=left)
                else:
                    await asyncio.sleep(0)  # a queued message: let the loop pick it up
            if running:  # handlers still going after ``timeout``: cancel them, and give them a moment to end
                for task in running:
                    task.cancel()
                await asyncio.wait(running, timeout=1.0)
        finally:
            for task in handlers:  # nobody reads these results; reading them keeps asyncio quiet
                if task.done() and not task.cancelled():
                    task.exception()
            # The loop re-raises the failure the run already reported; nothing new to log.
            with contextlib.suppress(BaseException):
                await self.stop()
