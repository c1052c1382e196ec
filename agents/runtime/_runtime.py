"""The AutoGen runtime the served teams run on."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import os
import uuid
from typing import Any, Callable, Coroutine, Sequence

from autogen_core import (
    EVENT_LOGGER_NAME,
    ROOT_LOGGER_NAME,
    Agent,
    AgentId,
    AgentInstantiationContext,
    AgentType,
    BaseAgent,
    CancellationToken,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    TopicId,
    TypePrefixSubscription,
    TypeSubscription,
    trace_invoke_agent_span,
)
from autogen_agentchat.teams._group_chat import _base_group_chat, _base_group_chat_manager, _chat_agent_container  # not exported (0.7.5)
from autogen_agentchat.teams._group_chat._events import GroupChatRequestPublish  # not exported (0.7.5)
from autogen_agentchat.teams._group_chat._sequential_routed_agent import FIFOLock, SequentialRoutedAgent  # not exported (0.7.5)
from autogen_core import _base_agent
from autogen_core._message_handler_context import MessageHandlerContext
from autogen_core._queue import Queue
from autogen_core._runtime_impl_helpers import SubscriptionManager
from autogen_core._serialization import MessageSerializer, SerializationRegistry
from autogen_core._single_threaded_agent_runtime import PublishMessageEnvelope, RunContext, SendMessageEnvelope
from autogen_core._telemetry import EnvelopeMetadata, get_telemetry_envelope_metadata
from autogen_core.logging import AgentConstructionExceptionEvent, DeliveryStage, MessageEvent, MessageKind
from opentelemetry import trace

from duet.agents._ids import new_message_id

_logger = logging.getLogger(ROOT_LOGGER_NAME)  # where the stock runtime writes its INFO lines
_event_logger = logging.getLogger(EVENT_LOGGER_NAME)


_NO_SPAN = contextlib.nullcontext()  # reusable: one object for every block
_HANDLING = MessageHandlerContext._MESSAGE_HANDLER_CONTEXT  # the agent whose handler runs (autogen-core 0.7.5, pinned)


def _invoke_agent_span(*args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[Any]:
    """AgentChat's span around each agent's turn in a team (``trace_invoke_agent_span``), opened only
    when a tracer provider is set: without one every span is a no-op, yet the stock helper keeps
    four generators, three context managers and two OpenTelemetry contexts alive for the turn."""
    if isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return _NO_SPAN
    return trace_invoke_agent_span(*args, **kwargs)


_chat_agent_container.trace_invoke_agent_span = _invoke_agent_span  # type: ignore[assignment]  # AgentChat 0.7.5, pinned


_REQUEST_TO_SPEAK = GroupChatRequestPublish()


def _request_to_speak() -> GroupChatRequestPublish:
    """What a group chat manager sends the agent whose turn it is: AgentChat (0.7.5, pinned) makes a
    new ``GroupChatRequestPublish`` for every turn (~370 bytes), kept for as long as the turn. It has
    no fields, and a pydantic model refuses attributes it does not declare: one serves every turn."""
    return _REQUEST_TO_SPEAK


_base_group_chat_manager.GroupChatRequestPublish = _request_to_speak  # type: ignore[assignment, misc]  # its only use: making one


def _known_id(subscription: object) -> str | None:
    """A subscription's id, or None for one whose id is not drawn yet (:class:`_IdOnRead`)."""
    return subscription._id if isinstance(subscription, _IdOnRead) else subscription.id  # type: ignore[attr-defined, no-any-return]


def _same_id(one: object, other: object) -> bool:
    # An id not drawn yet equals no other: when it is drawn it is a fresh uuid4.
    mine, theirs = _known_id(one), _known_id(other)
    return mine is not None and mine == theirs


class _IdOnRead:
    """For autogen-core's subscription classes (0.7.5, pinned), which draw a uuid4 string for their
    id when made: the id is drawn when first read instead. A two-agent team registers ten subscriptions on
    its runtime when it first runs, and nothing reads their ids unless a subscription is removed or
    compared with one of a stock class; equality compares the types first (as the stock ``__eq__``
    does either way), so adding one to a runtime draws no id."""

    _id: str | None

    @property
    def id(self) -> str:
        if self._id is None:
            self._id = str(uuid.uuid4())
        return self._id


class _TypeSubscription(_IdOnRead, TypeSubscription):
    def __init__(self, topic_type: str, agent_type: str | Any, id: str | None = None) -> None:
        super().__init__(topic_type, agent_type, id or "-")  # any id given: the stock __init__ draws none
        self._id = id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TypeSubscription):
            return False
        return (self.agent_type == other.agent_type and self.topic_type == other.topic_type) or _same_id(self, other)

    __hash__ = None  # type: ignore[assignment]  # as the stock class: equal by value, not hashable


class _TypePrefixSubscription(_IdOnRead, TypePrefixSubscription):
    # The one every registered agent type gets for its direct messages has the prefix "<type>:", a
    # string of its own (~100 bytes a type): that prefix is kept as None and read as the type and ":".

    def __init__(self, topic_type_prefix: str, agent_type: str | Any, id: str | None = None) -> None:
        super().__init__(topic_type_prefix, agent_type, id or "-")
        self._id = id
        if topic_type_prefix == f"{self._agent_type}:":
            self._topic_type_prefix = None  # type: ignore[assignment]

    @property
    def topic_type_prefix(self) -> str:
        prefix = self._topic_type_prefix
        return f"{self._agent_type}:" if prefix is None else prefix

    def is_match(self, topic_id: TopicId) -> bool:
        prefix = self._topic_type_prefix
        if prefix is not None:
            return topic_id.type.startswith(prefix)
        agent_type = self._agent_type
        return topic_id.type.startswith(agent_type) and topic_id.type[len(agent_type):len(agent_type) + 1] == ":"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TypePrefixSubscription):
            return False
        return (self.agent_type == other.agent_type and self.topic_type_prefix == other.topic_type_prefix) \
            or _same_id(self, other)

    __hash__ = None  # type: ignore[assignment]


# The subscriptions every AgentChat team adds for its participants and manager, and the one each
# registered agent type gets for its direct messages (AgentChat/autogen-core 0.7.5, pinned).
_base_group_chat.TypeSubscription = _TypeSubscription  # type: ignore[misc]
_base_agent.TypePrefixSubscription = _TypePrefixSubscription  # type: ignore[misc]


_NO_TOPICS: frozenset[TopicId] = frozenset()  # one for all: each frozenset() call makes a new one (~200 bytes)


class _Subscriptions(SubscriptionManager):
    """autogen-core's ``SubscriptionManager`` (0.7.5, pinned) without its cache of recipients: the
    stock manager keeps, for every topic a message was published to, the list of its recipients'
    ``AgentId`` objects (and the topic), and rebuilds all of it whenever a subscription is added. A
    team's runtime holds a handful of subscriptions; finding a topic's recipients among them when a
    message is published costs less than keeping them for every team a pipeline keeps."""

    def __init__(self) -> None:  # SubscriptionManager.__init__ would make the cache
        self._subscriptions = []
        self._seen_topics = _NO_TOPICS  # type: ignore[assignment]  # read only by the stock cache

    def _rebuild_subscriptions(self, topics: Any) -> None:
        """Nothing is cached."""

    async def get_subscribed_recipients(self, topic: TopicId) -> list[AgentId]:
        return [subscription.map_to_agent(topic) for subscription in self._subscriptions if subscription.is_match(topic)]


class _NoSpans:
    """Stands in for the runtime's trace helper when runtime tracing is disabled."""

    def trace_block(self, *args: Any, **kwargs: Any) -> contextlib.nullcontext[None]:
        return _NO_SPAN


class _FIFOLock:
    """Stands in for AgentChat's ``FIFOLock`` (0.7.5, pinned; the same order and hand-over; nothing
    checks its class): its waiting line is made when a second message first waits (an
    ``asyncio.Queue`` is four deques, ~2.5 KB), and it has two slots instead of a dict: a team's group
    chat manager and agent containers each hold one for every team a pipeline keeps."""

    __slots__ = ("_waiting", "_locked")

    def __init__(self) -> None:
        self._waiting: collections.deque[asyncio.Event] | None = None
        self._locked = False

    async def acquire(self) -> None:
        if not self._locked:
            self._locked = True
            return
        if self._waiting is None:
            self._waiting = collections.deque()
        event = asyncio.Event()
        self._waiting.append(event)
        await event.wait()

    def release(self) -> None:
        if self._waiting:
            self._waiting.popleft().set()  # the lock passes to the next in line
        else:
            self._locked = False


_handler_tables: dict[type[RoutedAgent], dict[type, list[Any]]] = {}
"""One message-handler table per ``RoutedAgent`` class (see :func:`_lighten`)."""
_in_order_types: dict[type[SequentialRoutedAgent], tuple[type, ...]] = {}
"""The message types a ``SequentialRoutedAgent`` class takes in order (see :func:`_lighten`)."""


def _lighten(agent: Agent) -> None:
    """Drops what every agent instance AgentChat makes for a team holds a copy of, though it is the
    same for each: a ``RoutedAgent``'s handler table, built from its class (lists of the class's
    handler functions by message type), is shared by the instances of a class whose tables are
    equal; a ``SequentialRoutedAgent`` (the group chat manager, the agent containers) gets a lock
    without a queue of its own until one is needed, and shares the tuple of the message types it
    takes in order (a new list for each instance) with the instances of its class whose types are the
    same. Nothing changes any of them after the agent is made (autogen-core/AgentChat 0.7.5, pinned)."""
    if isinstance(agent, RoutedAgent):
        table = agent._handlers
        shared = _handler_tables.setdefault(type(agent), table)
        if shared is not table and shared == table:
            agent._handlers = shared
    if isinstance(agent, SequentialRoutedAgent):
        if type(agent._fifo_lock) is FIFOLock and not agent._fifo_lock._locked:
            agent._fifo_lock = _FIFOLock()
        in_order = tuple(agent._sequential_message_types)
        shared_types = _in_order_types.setdefault(type(agent), in_order)
        if shared_types == in_order:
            agent._sequential_message_types = shared_types


class _AgentFactory:
    """An agent type's factory as the lean runtime registers it: the stock ``register_factory``
    (autogen-core 0.7.5, pinned) wraps each in a closure of its own (three cells and a function), and
    the stock ``_invoke_agent_factory`` reads the wrapper's signature when it makes the agent, which
    leaves an annotations dict on it: both kept for every agent type of every team a pipeline keeps.
    :meth:`LeanAgentRuntime._invoke_agent_factory` calls ``make`` and checks the class the same way."""

    __slots__ = ("make", "expected_class")
    __code__ = None  # the stock runtime compares an instance's factory code with this (never equal)

    def __init__(self, make: Callable[[], Any], expected_class: type[Any] | None) -> None:
        self.make = make
        self.expected_class = expected_class

    def __call__(self) -> Any:
        return self.make()


async def _on_message(agent: Agent, message: Any, ctx: MessageContext, *, published: bool) -> Any:
    """``agent.on_message(message, ctx)`` in the agent's handler context (``MessageHandlerContext``, set
    as ``populate_context`` sets it, without a generator); a published message's failure is logged as
    the stock runtime logs it. For a ``RoutedAgent`` or AgentChat's ``SequentialRoutedAgent`` (the
    agent containers and group chat manager of a team) it does what ``BaseAgent.on_message``,
    ``SequentialRoutedAgent.on_message_impl`` and ``RoutedAgent.on_message_impl`` do (0.7.5, pinned)
    in this one coroutine instead of four: the handler of a turn lasts as long as the turn, and each
    coroutine of the chain is kept for as long (any other agent is called as it is). A cancelled
    handler is not logged: its run was cancelled, nothing failed."""
    handling = _HANDLING.set(agent.id)
    try:
        kind = type(agent)
        routing = getattr(kind, "on_message_impl", None) if kind.on_message is BaseAgent.on_message else None  # type: ignore[comparison-overlap]
        if routing is SequentialRoutedAgent.on_message_impl:
            in_order = any(isinstance(message, sequential) for sequential in agent._sequential_message_types)  # type: ignore[attr-defined]
        elif routing is RoutedAgent.on_message_impl:
            in_order = False
        else:
            return await agent.on_message(message, ctx)
        if in_order:  # processed in the order received
            await agent._fifo_lock.acquire()  # type: ignore[attr-defined]
        try:
            handlers = agent._handlers.get(type(message))  # type: ignore[attr-defined]
            if handlers is not None:
                for handler in handlers:  # the first whose router takes it
                    if handler.router(message, ctx):
                        return await handler(agent, message, ctx)
            return await agent.on_unhandled_message(message, ctx)  # type: ignore[attr-defined]
        finally:
            if in_order:
                agent._fifo_lock.release()  # type: ignore[attr-defined]
    except asyncio.CancelledError:
        # A run cancelled (its client hung up) cancels every handler of it: the stock runtime logs each
        # with its traceback, which the process's filter drops (api/server/_process.py), but only after the
        # record is made and its traceback formatted for secret masking: 1-2 ms of the event loop per
        # handler, some hundred milliseconds for a few hundred streams cancelled at once.
        raise
    except BaseException:
        if published:
            _logger.error(f"Error processing publish message for {agent.id}", exc_info=True)  # as the stock runtime
        raise
    finally:
        _HANDLING.reset(handling)


class _FirstWaitEvent(asyncio.Event):
    """An ``asyncio.Event`` whose waiting list is made by the first ``wait()`` (an event that is only
    set, cleared and read holds none)."""

    def __init__(self) -> None:  # asyncio.Event.__init__ would make the deque
        self._waiters = ()  # type: ignore[assignment]  # iterated by set(): empty until someone waits
        self._value = False

    async def wait(self) -> bool:
        if not self._value and type(self._waiters) is tuple:
            self._waiters = collections.deque()
        return await super().wait()


def lighten_queue(queue: Any) -> Any:
    """Drops the two of an unbounded queue's four deques (~760 bytes each) it uses only when waited
    on: the putters' line (a put on an unbounded queue never waits) and the ``join()`` event's
    waiting list (made by the first ``join()``). For an ``asyncio.Queue`` or autogen-core's copy of
    it (the same fields; 0.7.5, pinned); a bounded queue is returned as it is. A team and its
    runtime each hold such a queue, and a pipeline keeps a team for every request in flight."""
    if queue._maxsize <= 0 and not queue._putters and queue._finished.is_set():
        queue._putters = ()
        finished = _FirstWaitEvent()
        finished.set()
        queue._finished = finished
    return queue


class _LinesMadeOnUse:
    """For a queue class (``asyncio.Queue`` or autogen-core's copy of it: the same fields; 0.7.5,
    pinned): its items' and its getters' deques (~760 bytes each) are made by the first put and the
    first get that waits. A team's queues are held by every pooled team, and most never queue."""

    _queue: Any
    _getters: Any

    def _lines_made_on_use(self) -> None:
        self._queue = self._getters = ()  # read as empty until then

    def _put(self, item: Any) -> None:
        if type(self._queue) is tuple:
            self._queue = collections.deque()
        self._queue.append(item)

    def _getters_line(self) -> collections.deque[asyncio.Future[Any]]:
        if type(self._getters) is tuple:
            self._getters = collections.deque()
        return self._getters  # type: ignore[no-any-return]


class HandOverQueue(_LinesMadeOnUse, asyncio.Queue):  # type: ignore[type-arg]
    """An unbounded ``asyncio.Queue`` whose ``get()`` returns a future (awaited as the coroutine
    was) instead of a coroutine, and whose ``put`` hands an item straight to a waiting ``get``.

    For a team's output queue: AgentChat's ``run_stream`` (0.7.5, pinned) waits for each message as
    ``ensure_future(queue.get())``, a task (and its coroutine) for every message of every run; a
    future is taken as it is. Nothing calls ``task_done`` or ``join`` on it."""

    def __init__(self) -> None:
        super().__init__()
        self._lines_made_on_use()

    def get(self) -> asyncio.Future[Any]:  # type: ignore[override]
        future = self._get_loop().create_future()
        if self._queue:
            future.set_result(self.get_nowait())
        elif type(self._getters) is tuple:
            self._getters = [future]  # a list: a run waits for one message at a time (a deque is ~760 bytes)
        else:
            self._getters.append(future)
        return future

    def put_nowait(self, item: Any) -> None:
        self._unfinished_tasks += 1
        self._finished.clear()
        getters = self._getters
        while getters:
            getter = getters.pop(0)
            if not getter.done():  # a get that was cancelled takes nothing
                getter.set_result(item)
                break
        else:
            self._put(item)
        if not getters:
            self._getters = ()  # the line is made again by the next get that waits


class _KnownSerializers(SerializationRegistry):
    """The message serializers of every lean runtime in the process, by type name and content type.
    The stock runtime keeps a registry of its own, and each team adds a serializer for each message
    type its agents handle to it when it first runs (about 1.5 KB a team); the first one added for
    a type is kept. A single-process runtime only uses them to write its event log."""

    def add_serializer(self, serializer: MessageSerializer[Any] | Sequence[MessageSerializer[Any]]) -> None:
        if isinstance(serializer, Sequence):
            for one in serializer:
                self.add_serializer(one)
        elif (serializer.type_name, serializer.data_content_type) not in self._serializers:
            self._serializers[(serializer.type_name, serializer.data_content_type)] = serializer


_KNOWN_SERIALIZERS = _KnownSerializers()


class _StopFlag:
    """What ``RunContext`` asks of its ``asyncio.Event``, which nothing awaits: set and read."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class _RunContext(RunContext):
    """autogen-core's ``RunContext`` (0.7.5, pinned) with a flag for its stop signal instead of an
    ``asyncio.Event`` and the waiting list every event makes (its loop only reads the signal), and
    whose message loop starts with the first message queued (:meth:`start_loop`): a lean runtime
    hands most messages straight to their handlers, and a loop task waiting on an empty queue costs
    a task and its coroutines for every team in a run. Stopping works as the stock context's: a
    handler's failure that no loop raised is raised by ``stop`` and ``stop_when_idle``."""

    def __init__(self, runtime: SingleThreadedAgentRuntime) -> None:  # RunContext.__init__ would make the event
        self._runtime = runtime
        self._run_task: asyncio.Task[None] | None = None
        self._stopped = _StopFlag()  # type: ignore[assignment]
        if not runtime._message_queue.empty():  # queued before the runtime started
            self.start_loop()

    def start_loop(self) -> None:
        if self._run_task is None and not self._stopped.is_set():
            self._run_task = asyncio.create_task(self._run())

    @property
    def loop_running(self) -> bool:
        return self._run_task is not None and not self._run_task.done()

    async def stop(self) -> None:
        self._stopped.set()
        self._runtime._message_queue.shutdown(immediate=True)  # type: ignore[attr-defined]
        await self._end_loop()

    async def stop_when_idle(self) -> None:
        await self._runtime._message_queue.join()  # type: ignore[attr-defined]
        await self.stop()

    async def _end_loop(self) -> None:
        if self._run_task is not None:
            await self._run_task  # raises what the loop raised, a handler's failure among it
            return
        failure = self._runtime._background_exception  # type: ignore[attr-defined]
        if failure is not None:  # as the loop raises it when its queue shuts down
            self._runtime._background_exception = None  # type: ignore[attr-defined]
            raise failure


class _MessageQueue(_LinesMadeOnUse, Queue):  # type: ignore[type-arg]
    """The lean runtime's message queue: a message put on it starts the runtime's message loop."""

    def __init__(self, runtime: "LeanAgentRuntime") -> None:
        super().__init__()
        self._lines_made_on_use()
        self._runtime = runtime

    async def get(self) -> Any:
        self._getters_line()
        return await super().get()

    def _put(self, item: Any) -> None:
        super()._put(item)
        run_context = self._runtime._run_context
        if run_context is not None:
            run_context.start_loop()  # type: ignore[attr-defined]


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
    The agents it makes share what AgentChat would copy into each (:func:`_lighten`), every lean
    runtime shares one registry of message serializers, a run's stop signal is a flag, and its
    message queue makes no deque it does not use (:func:`lighten_queue`): a pipeline keeps a team,
    and so a runtime and its agents, for every request in flight.

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
        self._subscription_manager = _Subscriptions()
        self._message_queue = lighten_queue(_MessageQueue(self))
        self._spans = os.environ.get("AUTOGEN_DISABLE_RUNTIME_TRACING") != "true"
        if not self._spans:
            self._tracer_helper = _NoSpans()  # type: ignore[assignment]

    def _unobserved(self) -> bool:
        """Nothing reads the runtime's logs, event log or spans, and no handler intervenes."""
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
        self._run_context = _RunContext(self)

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            self._message_queue = lighten_queue(_MessageQueue(self))  # instead of the stock runtime's fresh queue

    async def stop_when_idle(self) -> None:
        try:
            await super().stop_when_idle()
        finally:
            self._message_queue = lighten_queue(_MessageQueue(self))

    async def register_factory(
        self, type: str | AgentType, agent_factory: Callable[[], Any], *, expected_class: type[Any] | None = None
    ) -> AgentType:
        if isinstance(type, str):
            type = AgentType(type)
        if type.type in self._agent_factories:
            raise ValueError(f"Agent with type {type} already exists.")  # as the stock runtime
        self._agent_factories[type.type] = _AgentFactory(agent_factory, expected_class)
        return type

    async def _invoke_agent_factory(self, agent_factory: Callable[..., Any], agent_id: AgentId) -> Any:
        if type(agent_factory) is not _AgentFactory:
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
        _lighten(agent)
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
        if _event_logger.isEnabledFor(logging.INFO):
            _event_logger.info(
                MessageEvent(
                    payload=self._try_serialize(message),
                    sender=sender,
                    receiver=recipient,
                    kind=MessageKind.DIRECT,
                    delivery_stage=DeliveryStage.SEND,
                )
            )
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
        if message_id is None:
            message_id = new_message_id()
        if _logger.isEnabledFor(logging.INFO):
            return await super().publish_message(
                message, topic_id, sender=sender, cancellation_token=cancellation_token, message_id=message_id
            )
        # Mirrors SingleThreadedAgentRuntime.publish_message of autogen-core 0.7.5 (pinned), without
        # the INFO line nobody logs.
        with self._tracer_helper.trace_block(
            "create", topic_id, parent=None, extraAttributes={"message_type": type(message).__name__}
        ):
            if cancellation_token is None:
                cancellation_token = CancellationToken()
            if _event_logger.isEnabledFor(logging.INFO):
                _event_logger.info(
                    MessageEvent(
                        payload=self._try_serialize(message),
                        sender=sender,
                        receiver=topic_id,
                        kind=MessageKind.PUBLISH,
                        delivery_stage=DeliveryStage.SEND,
                    )
                )
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
        return (self._run_context is not None and self._background_exception is None and queue.empty()
                and not queue._is_shutdown and self._unobserved())

    def _start_handler(self, handler: Coroutine[Any, Any, None]) -> None:
        """Runs ``handler`` (which ends with ``task_done()``) in a task of its own, as the message loop
        would after taking its message from the queue, but without the loop's two turns per message
        (waking on the queue, then ``sleep(0)``). Counted as an unfinished queue item, so
        ``stop_when_idle`` waits for it."""
        queue = self._message_queue
        queue._unfinished_tasks += 1
        queue._finished.clear()
        task = asyncio.get_running_loop().create_task(handler)
        self._background_tasks.add(task)
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[Any]) -> None:
        handlers = self._background_tasks
        handlers.discard(task)
        if not handlers:
            handlers.clear()  # a set keeps the table it grew to until cleared (~0.5 KB a runtime past four handlers)

    async def _process_send(self, message_envelope: SendMessageEnvelope) -> None:
        if not self._unobserved():
            return await super()._process_send(message_envelope)
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
            response = await _on_message(agent, message_envelope.message, context, published=False)
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
            return
        finally:
            self._message_queue.task_done()
        if not future.done():
            future.set_result(response)

    async def _process_publish(self, message_envelope: PublishMessageEnvelope) -> None:
        if not self._unobserved():
            return await super()._process_publish(message_envelope)
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
                deliveries.append(_on_message(await self._get_agent(agent_id), message_envelope.message, context, published=True))
            if len(deliveries) == 1:
                await deliveries[0]
            elif deliveries:
                await asyncio.gather(*deliveries)
        except BaseException as exc:
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
