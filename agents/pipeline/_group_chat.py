"""The agent container and group chat manager of Duet's team as served (``_RoundRobinTeam``): AgentChat's,
subclassed (AutoGen's modules are left as they are: a stock team in the same process runs as stock),
lighter for a team a pipeline keeps for every request in flight (AgentChat 0.7.5, pinned)."""

from __future__ import annotations

import asyncio
from typing import Any, TypeGuard

from autogen_agentchat.base import Response, Team
from autogen_agentchat.teams import BaseGroupChat
from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer  # not exported (0.7.5)
from autogen_agentchat.teams._group_chat._events import (  # not exported (0.7.5)
    GroupChatAgentResponse,
    GroupChatError,
    GroupChatMessage,
    GroupChatRequestPublish,
    GroupChatReset,
    GroupChatStart,
    GroupChatTermination,
    SerializableException,
)
from autogen_agentchat.teams._group_chat._round_robin_group_chat import RoundRobinGroupChatManager  # not exported (0.7.5)
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage, StopMessage
from autogen_core import BaseAgent, CancellationToken, DefaultTopicId, MessageContext, RoutedAgent, TopicId, event, rpc
from opentelemetry import trace

from duet.agents._base import DuetAgent
from duet.agents.runtime import noted_at_once


_KINDS: dict[tuple[type, type], bool] = {}
_MOST_KINDS = 256  # (class, kind) pairs kept; past it, asked each time
"""Whether an instance of a class is one of a kind, by (class, kind): see :func:`is_team`."""


def _of_kind(obj: object, kind: type) -> bool:
    """``isinstance(obj, kind)``, kept for the class of ``obj`` (see :func:`is_team`)."""
    known = isinstance(obj, kind)
    if len(_KINDS) < _MOST_KINDS:
        _KINDS[obj.__class__, kind] = known
    return known


def is_team(obj: object) -> TypeGuard[Team]:
    """``isinstance(obj, Team)``, asked once per class of ``obj``. AgentChat's ``Team`` and its
    subclasses (0.7.5, pinned) have typing's protocol metaclass (``Team`` derives from the
    ``TaskRunner`` protocol): ~8 Python calls an ``isinstance``, where a dictionary look-up is 1, and
    the answer depends on the class alone. A served run asks five times (each turn, each reset)."""
    known = _KINDS.get((obj.__class__, Team))
    return _of_kind(obj, Team) if known is None else known


def is_group_chat(obj: object) -> TypeGuard[BaseGroupChat]:
    """``isinstance(obj, BaseGroupChat)``, asked once per class of ``obj`` (see :func:`is_team`)."""
    known = _KINDS.get((obj.__class__, BaseGroupChat))
    return _of_kind(obj, BaseGroupChat) if known is None else known


def is_duet_agent(obj: object) -> TypeGuard[DuetAgent]:
    """Whether ``obj`` is a Duet agent whose turn is streamed as :class:`DuetAgent`'s own (so its
    container may await :meth:`DuetAgent.reply_in_run`); a subclass with its own ``on_messages_stream``
    is handled as any agent. Asked once per class of ``obj`` (see :func:`is_team`: an agent's class also
    has typing's protocol metaclass)."""
    known = _KINDS.get((obj.__class__, DuetAgent))
    if known is None:
        known = _of_kind(obj, DuetAgent) and getattr(type(obj), "on_messages_stream", None) is DuetAgent.on_messages_stream
        if len(_KINDS) < _MOST_KINDS:
            _KINDS[obj.__class__, DuetAgent] = known
    return known


def _spans_recorded() -> bool:
    """Whether a tracer provider is set: without one, every span AgentChat opens is a no-op. (Asked of
    OpenTelemetry each turn: a provider set, or named by ``OTEL_PYTHON_TRACER_PROVIDER``, at any time
    counts from the next turn.)"""
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


_TOPICS: dict[tuple[str, str], DefaultTopicId] = {}
_MOST_TOPICS = 256  # (topic type, source) pairs kept; past it, begun again
"""The topics :func:`_team_topic` made, by type and source: a pipeline's pooled teams share their team id
and topic types, so a pipeline keeps a few (the group's, the output's, each agent's)."""


def _team_topic(topic_type: str, agent: BaseAgent) -> DefaultTopicId:
    """``DefaultTopicId(type=topic_type)`` as made in ``agent``'s handler (its source: the agent's key),
    without the pattern check ``TopicId`` makes of its type each time (a regex a message), for a topic
    type AgentChat made for the team (0.7.5, pinned): the group's and the output's,
    ``group_topic_<uuid>`` and ``output_topic_<uuid>``, or an agent's (its type, checked when the agent
    was made). A topic is a frozen dataclass, equal by its fields: one made is kept and shared (a
    dictionary look-up a message instead of three calls)."""
    source = agent._id._key  # AgentId.key, read
    topic = _TOPICS.get((topic_type, source))
    if topic is None:
        topic = object.__new__(DefaultTopicId)
        object.__setattr__(topic, "type", topic_type)  # a frozen dataclass's fields, set as its __init__ sets them
        object.__setattr__(topic, "source", source)
        if len(_TOPICS) >= _MOST_TOPICS:  # (teams made one by one, new_team(): topics of their own) begun again
            _TOPICS.clear()
        _TOPICS[topic_type, source] = topic
    return topic


# Duet's container and manager publish as BaseAgent.publish_message of autogen-core 0.7.5 (pinned) does,
# ``self._runtime.publish_message(message, topic, sender=self._id, cancellation_token=...)``, in the
# handler's own coroutine: neither BaseAgent's coroutine nor a helper's frame for each of a run's messages.
_found_handlers: dict[type, Any] = {}
_handled_types: dict[type, Any] = {}


class _HandlersFoundOnce(RoutedAgent):
    """A routed agent class whose message handlers are found once. autogen-core's ``RoutedAgent``
    (0.7.5, pinned) walks every attribute of the class (``dir``, ``getattr``, ``callable``,
    ``hasattr``: ~250 Python calls) for each instance it makes, and again, with a serializer look-up
    per message type (~320), when the class is registered on a runtime: for each new team, at its
    first run, three of each (two containers and the manager). A class's handlers never change."""

    @classmethod
    def _discover_handlers(cls) -> Any:
        found = _found_handlers.get(cls)
        if found is None:
            found = _found_handlers[cls] = super()._discover_handlers()
        return found

    @classmethod
    def _handles_types(cls) -> Any:
        types = _handled_types.get(cls)
        if types is None:
            types = _handled_types[cls] = super()._handles_types()
        return types


class TurnContainer(_HandlersFoundOnce, ChatAgentContainer):
    """AgentChat's agent container, which opens its span around an agent's turn
    (``trace_invoke_agent_span``) only when a tracer provider is set. Without one the span is a
    no-op, yet the stock helper keeps four generators, three context managers and two OpenTelemetry
    contexts alive for as long as the turn: ~2.9 KB for every stream in flight (tracemalloc)."""

    @event
    async def handle_request(self, message: GroupChatRequestPublish, ctx: MessageContext) -> None:  # type: ignore[override]
        agent = self._agent
        if is_team(agent) or _spans_recorded():
            return await super().handle_request(message, ctx)  # type: ignore[call-arg]  # the handler, bound
        # ChatAgentContainer.handle_request for an agent (AgentChat 0.7.5, pinned), outside the span;
        # here, not in a coroutine of its own: the turn's coroutines are kept for as long as the turn.
        parent = _team_topic(self._parent_topic_type, self)
        try:
            # A Duet agent in a Duet run yields its reply alone: awaited, without its stream's generator.
            response = await agent.reply_in_run(self._message_buffer, ctx.cancellation_token) if is_duet_agent(agent) else None
            if response is not None:
                await self._log_message(response.chat_message)
            else:
                async for item in agent.on_messages_stream(self._message_buffer, ctx.cancellation_token):  # type: ignore[union-attr]  # not a Team (asked above)
                    if isinstance(item, Response):
                        await self._log_message(item.chat_message)
                        response = item
                    else:
                        await self._log_message(item)
            if response is None:
                raise RuntimeError("The agent did not produce a final response. Check the agent's on_messages_stream method.")
            self._message_buffer.clear()
            await self._runtime.publish_message(GroupChatAgentResponse(response=response, name=agent.name), parent,
                                                sender=self._id, cancellation_token=ctx.cancellation_token)
        except Exception as exc:
            await self._runtime.publish_message(GroupChatError(error=SerializableException.from_exception(exc)), parent,
                                                sender=self._id, cancellation_token=ctx.cancellation_token)
            raise

    @rpc
    async def handle_reset(self, message: GroupChatReset, ctx: MessageContext) -> None:  # type: ignore[override]
        # Mirrors ChatAgentContainer.handle_reset of autogen-agentchat 0.7.5 (pinned), whether its agent is a
        # team asked once per class (is_team).
        self._message_buffer.clear()
        if is_team(self._agent):
            await self._agent.reset()
        else:
            await self._agent.on_reset(ctx.cancellation_token)  # type: ignore[union-attr]  # not a Team: a ChatAgent

    async def _log_message(self, message: BaseAgentEvent | BaseChatMessage) -> None:
        # Mirrors ChatAgentContainer._log_message of autogen-agentchat 0.7.5 (pinned), its topic made without
        # the pattern check (_team_topic).
        if not self._message_factory.is_registered(message.__class__):
            raise ValueError(f"Message type {message.__class__} is not registered.")
        await self._runtime.publish_message(GroupChatMessage(message=message), _team_topic(self._output_topic_type, self),
                                            sender=self._id, cancellation_token=None)


TurnContainer._noted_at_once = noted_at_once(TurnContainer)  # type: ignore[attr-defined]  # the task, others' replies: buffered


_REQUEST_TO_SPEAK = GroupChatRequestPublish()


class RoundRobinManager(_HandlersFoundOnce, RoundRobinGroupChatManager):
    """AgentChat's round-robin group chat manager, which asks every speaker for its turn with one
    shared request: AgentChat makes a new ``GroupChatRequestPublish`` for every turn (~370 bytes),
    kept for as long as the turn. It has no fields, and a pydantic model refuses attributes it does
    not declare: one serves every turn of every team.

    Round-robin's own choice of the next speaker is asked for in the manager's task: AgentChat runs
    every ``select_speaker`` as a task of its own, linked to the run's cancellation token (a task and
    a callback kept by the token for every turn), which a choice that never waits does not need."""

    async def publish_message(self, message: Any, topic_id: TopicId, *,
                              cancellation_token: CancellationToken | None = None) -> None:
        if type(message) is GroupChatRequestPublish:
            message = _REQUEST_TO_SPEAK
        await super().publish_message(message, topic_id, cancellation_token=cancellation_token)

    @rpc
    async def handle_start(self, message: GroupChatStart, ctx: MessageContext) -> None:  # type: ignore[override]
        # Mirrors BaseGroupChatManager.handle_start of autogen-agentchat 0.7.5 (pinned), its two topics made
        # without the pattern check (_team_topic) and published in this coroutine (see _found_handlers): ~30 calls a run.
        if self._termination_condition is not None and self._termination_condition.terminated:
            await self._signal_termination(StopMessage(content="The group chat has already terminated.", source=self._name))
            return
        await self.validate_group_state(message.messages)
        if message.messages is not None:
            # One start for both topics (AgentChat makes two equal ones): the output topic's is the manager's log, which
            # nobody else receives, and the participants only read its messages.
            start = GroupChatStart(messages=message.messages)
            await self._runtime.publish_message(start, _team_topic(self._output_topic_type, self), sender=self._id,
                                                cancellation_token=None)
            if message.output_task_messages:
                for task_message in message.messages:
                    await self._output_message_queue.put(task_message)
            await self._runtime.publish_message(start, _team_topic(self._group_topic_type, self), sender=self._id,
                                                cancellation_token=ctx.cancellation_token)
            await self.update_message_thread(message.messages)
            if await self._apply_termination_condition(message.messages):
                return
        await self._transition_to_next_speakers(ctx.cancellation_token)

    async def _signal_termination(self, message: StopMessage) -> None:
        # Mirrors BaseGroupChatManager._signal_termination of autogen-agentchat 0.7.5 (pinned), its topic made
        # without the pattern check (_team_topic).
        termination_event = GroupChatTermination(message=message)
        await self._runtime.publish_message(termination_event, _team_topic(self._output_topic_type, self), sender=self._id,
                                            cancellation_token=None)
        await self._output_message_queue.put(termination_event)

    async def _transition_to_next_speakers(self, cancellation_token: CancellationToken) -> None:
        if type(self).select_speaker is not RoundRobinGroupChatManager.select_speaker or self._emit_team_events:
            await super()._transition_to_next_speakers(cancellation_token)
            return
        # Mirrors BaseGroupChatManager._transition_to_next_speakers of autogen-agentchat 0.7.5 (pinned) for
        # round-robin's choice (one speaker, no wait): a token already cancelled cancels the turn before the
        # choice, as the linked future of the stock method is cancelled before its task runs; no selection
        # event is made (the stock method makes one only to publish it when team events are emitted).
        if cancellation_token.is_cancelled():
            raise asyncio.CancelledError()
        speaker_name = await self.select_speaker(self._message_thread)
        assert isinstance(speaker_name, str)  # round-robin's choice is one name, of a participant
        await self._runtime.publish_message(_REQUEST_TO_SPEAK, _team_topic(self._participant_name_to_topic_type[speaker_name], self),
                                            sender=self._id, cancellation_token=cancellation_token)
        self._active_speakers.append(speaker_name)


RoundRobinManager._noted_at_once = noted_at_once(RoundRobinManager)  # type: ignore[attr-defined]  # an agent's message: queued
