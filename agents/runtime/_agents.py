"""The agents a lean runtime makes and how it hands them their messages: what every instance of a
class holds a copy of is shared (:func:`lighten_agent`), an agent type's factory is a two-slot object
(:class:`AgentFactory`), and a routed agent gets its message in one coroutine (:func:`deliver`).
Relies on autogen-core/AgentChat 0.7.5 internals (pinned)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from autogen_agentchat.teams._group_chat._base_group_chat_manager import BaseGroupChatManager  # not exported (0.7.5)
from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer  # not exported (0.7.5)
from autogen_agentchat.teams._group_chat._sequential_routed_agent import FIFOLock, SequentialRoutedAgent  # not exported (0.7.5)
from autogen_core import ROOT_LOGGER_NAME, Agent, BaseAgent, MessageContext, RoutedAgent
from autogen_core._message_handler_context import MessageHandlerContext

from duet.agents.runtime._queues import LeanFIFOLock

_logger = logging.getLogger(ROOT_LOGGER_NAME)  # where the stock runtime logs a handler's failure
_HANDLING = MessageHandlerContext._MESSAGE_HANDLER_CONTEXT  # the agent whose handler runs (autogen-core 0.7.5, pinned)

_handler_tables: dict[type[RoutedAgent], dict[type, list[Any]]] = {}
"""One message-handler table per ``RoutedAgent`` class (see :func:`lighten_agent`)."""
_in_order_types: dict[type[SequentialRoutedAgent], tuple[type, ...]] = {}
"""The message types a ``SequentialRoutedAgent`` class takes in order (see :func:`lighten_agent`)."""


def lighten_agent(agent: Agent) -> None:
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
            agent._handlers = shared  # type: ignore[assignment]  # the table, shared
    if isinstance(agent, SequentialRoutedAgent):
        if type(agent._fifo_lock) is FIFOLock and not agent._fifo_lock._locked:
            agent._fifo_lock = LeanFIFOLock()  # type: ignore[assignment]  # stands in for it: nothing checks its class
        in_order = tuple(agent._sequential_message_types)
        shared_types = _in_order_types.setdefault(type(agent), in_order)
        agent._sequential_message_types = shared_types if shared_types == in_order else in_order  # a tuple: isinstance takes it


class AgentFactory:
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


_ROUTED, _SEQUENTIAL = 1, 2
_routing_of: dict[type, int | None] = {}
"""How each agent class routes its messages (see :func:`_routing`): one entry per class."""


def _routing(kind: type) -> int | None:
    """``_SEQUENTIAL`` for a class that routes as AgentChat's ``SequentialRoutedAgent``, ``_ROUTED`` as
    ``RoutedAgent``, None for any other (its own ``on_message`` or ``on_message_impl``)."""
    if kind.on_message is not BaseAgent.on_message:  # type: ignore[attr-defined]
        return None
    routing = getattr(kind, "on_message_impl", None)
    if routing is SequentialRoutedAgent.on_message_impl:
        return _SEQUENTIAL
    return _ROUTED if routing is RoutedAgent.on_message_impl else None


async def _delivered_as_is(agent: Agent, message: Any, ctx: MessageContext, *, published: bool) -> Any:
    """``agent.on_message(message, ctx)`` for an agent that routes its own way, in its handler context,
    a published message's failure logged as :func:`deliver` logs it."""
    handling = _HANDLING.set(agent.id)
    try:
        return await agent.on_message(message, ctx)
    except asyncio.CancelledError:
        raise  # not logged: see deliver
    except BaseException:
        if published:
            _logger.error(f"Error processing publish message for {agent.id}", exc_info=True)  # as the stock runtime
        raise
    finally:
        _HANDLING.reset(handling)


_NOTED_AT_ONCE = frozenset((
    ChatAgentContainer.handle_start,  # the task's messages, into the agent's buffer
    ChatAgentContainer.handle_agent_response,  # another agent's reply, into the buffer
    ChatAgentContainer.handle_team_response,  # a team's replies, into the buffer
    BaseGroupChatManager.handle_group_chat_message,  # an agent's message, into the team's output queue
))
"""AgentChat's handlers (0.7.5, pinned) that only note a message down: a list append or a put on the team's
output queue (unbounded), nothing awaited, nothing published, nothing else changed (see :func:`notes_at_once`)."""


def noted_at_once(agent_class: type[SequentialRoutedAgent]) -> frozenset[type]:
    """The message types ``agent_class`` handles with one of AgentChat's handlers that only note a
    message down (:data:`_NOTED_AT_ONCE`): the only handler of its type, not overridden. A class that
    keeps them as its ``_noted_at_once`` has such messages handled in their publisher's step on an
    unobserved lean runtime, while its lock is free and no other handler is under way
    (:meth:`~duet.agents.runtime.LeanAgentRuntime._publish_at_once`)."""
    by_type: dict[type, list[Any]] = {}
    for handler in agent_class._discover_handlers():
        for target in handler.target_types:
            by_type.setdefault(target, []).append(handler)
    return frozenset(target for target, handlers in by_type.items() if len(handlers) == 1 and handlers[0] in _NOTED_AT_ONCE)


async def deliver(agent: Agent, message: Any, ctx: MessageContext, *, published: bool) -> Any:
    """``agent.on_message(message, ctx)`` in the agent's handler context (``MessageHandlerContext``, set
    as ``populate_context`` sets it, without a generator); a published message's failure is logged as
    the stock runtime logs it. For a ``RoutedAgent`` or AgentChat's ``SequentialRoutedAgent`` (the
    agent containers and group chat manager of a team) it does what ``BaseAgent.on_message``,
    ``SequentialRoutedAgent.on_message_impl`` and ``RoutedAgent.on_message_impl`` do (0.7.5, pinned)
    in this one coroutine instead of four: the handler of a turn lasts as long as the turn, and each
    coroutine of the chain is kept for as long (any other agent is called as it is). A cancelled
    handler is not logged: its run was cancelled, nothing failed."""
    kind = type(agent)
    try:
        routing = _routing_of[kind]
    except KeyError:
        routing = _routing_of[kind] = _routing(kind)
    if routing is None:  # an agent that routes its own way: called as it is
        return await _delivered_as_is(agent, message, ctx, published=published)
    in_order = False
    if routing == _SEQUENTIAL:  # AgentChat's SequentialRoutedAgent: its sequential types in the order received
        sequential = agent._sequential_message_types  # type: ignore[attr-defined]
        in_order = (isinstance(message, sequential) if type(sequential) is tuple  # as lighten_agent leaves it
                    else any(isinstance(message, one) for one in sequential))
    handling = _HANDLING.set(agent._id)  # type: ignore[attr-defined]  # a BaseAgent's id, read
    try:
        if in_order:  # a free LeanFIFOLock taken without its acquire's coroutine
            lock = agent._fifo_lock  # type: ignore[attr-defined]
            if type(lock) is LeanFIFOLock and not lock._locked:
                lock._locked = True
            else:
                await lock.acquire()
        try:
            handlers = agent._handlers.get(type(message))  # type: ignore[attr-defined]
            if handlers is not None:
                for handler in handlers:  # the first whose router takes it
                    if handler.router(message, ctx):
                        return await handler(agent, message, ctx)
            return await agent.on_unhandled_message(message, ctx)  # type: ignore[attr-defined]
        finally:
            if in_order:  # released as LeanFIFOLock.release does, in this frame when nobody waits
                if type(lock) is LeanFIFOLock and not lock._waiting:
                    lock._locked = False
                else:
                    lock.release()
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
