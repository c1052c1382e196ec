"""The one way a served pipeline's teams are made, from settings or from a team file."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from autogen_agentchat.base import OrTerminationCondition, Team, TerminatedException, TerminationCondition
from autogen_agentchat.conditions import HandoffTermination, SourceMatchTermination
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage, HandoffMessage, MessageFactory, StopMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_agentchat.teams._group_chat._round_robin_group_chat import RoundRobinGroupChatConfig  # not exported (0.7.5)
from autogen_core import AgentRuntime, ComponentModel, Subscription
from autogen_core.models import ChatCompletionClient

from duet.agents._answer_agent import AnswerAgent
from duet.agents._base import DuetAgent, DuetAgentConfig
from duet.agents._errors import TeamLoadError
from duet.agents._grounding import GroundingAgent
from duet.agents._ids import new_message_id
from duet.agents._names import ANSWERER_NAME, REASONER_NAME
from duet.agents.upstream import ANSWER_MODEL_INFO, OpenAICompatibleClient
from duet.agents.pipeline._pool import TeamSlot
from duet.agents._reasoning_agent import ReasoningAgent
from duet.agents.runtime import HandOverQueue, LeanAgentRuntime, TeamRegistration, lighten_queue
from duet.agents._settings import REASONER_MODEL_INFO, PipelineSettings
from duet.agents.pipeline._group_chat import RoundRobinManager, TurnContainer
from duet.agents.pipeline._team import build_team, duet_termination
from duet.agents.pipeline._team_files import diagnose, load_team

_DUET_AGENTS: dict[str, type[DuetAgent]] = {
    spelling: agent
    for agent in (GroundingAgent, ReasoningAgent, AnswerAgent)
    for spelling in (agent.component_provider_override, f"{agent.__module__}.{agent.__qualname__}")
}
_DUET_TEAMS = (RoundRobinGroupChat.component_provider_override, f"{RoundRobinGroupChat.__module__}.{RoundRobinGroupChat.__qualname__}")
_DUET_TERMINATION = duet_termination().dump_component()


CLOSE_TIMEOUT = 5.0
"""Seconds a factory that failed to load gives the clients it made to close."""


def _provider_class(component: ComponentModel) -> type[DuetAgent] | None:
    agent = _DUET_AGENTS.get(component.provider)
    if agent is None or component.component_version not in (None, agent.component_version):
        return None
    return agent


def made_for_concurrent_use(client: ChatCompletionClient) -> bool:
    """True for the model clients one instance of which may serve every pooled team at once: Duet's
    :class:`~duet.agents.OpenAICompatibleClient` and autogen-ext's OpenAI and Azure OpenAI clients
    (a connection pool, nothing kept between calls but usage totals). Any other client, a subclass
    of these included, is custom code that may keep state between calls (AutoGen's
    ``ReplayChatCompletionClient`` replays a script), so each team gets its own."""
    if type(client) is OpenAICompatibleClient:
        return True
    from autogen_ext.models.openai import AzureOpenAIChatCompletionClient, OpenAIChatCompletionClient  # imported once a client needs it

    return type(client) in (OpenAIChatCompletionClient, AzureOpenAIChatCompletionClient)


def _close_from_sync_code(clients: Iterable[ChatCompletionClient]) -> None:
    """Closes ``clients`` before returning, from synchronous code (a factory that failed to load),
    whether or not an event loop runs in this thread: on a loop of their own, in a thread. Clients
    only just made hold nothing bound to another loop."""

    async def close_all() -> None:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()

    closer = threading.Thread(target=asyncio.run, args=(close_all(),), name="duet-close-clients", daemon=True)
    closer.start()
    closer.join(CLOSE_TIMEOUT)


class _InTurnOr(OrTerminationCondition):
    # Duet's termination (duet_termination) as served: the stock condition gathers its conditions,
    # a task for each on every message, for two checks that never wait; these are asked one after
    # the other in the calling task. No docstring and the stock label: it dumps as the stock condition.
    component_label = "OrTerminationCondition"

    @property
    def terminated(self) -> bool:
        # The stock property's any() over a generator, as a loop (asked four times a run, a generator step per condition).
        for condition in self._conditions:  # noqa: SIM110 - the loop is the point (no generator)
            if condition.terminated:
                return True
        return False

    async def __call__(self, messages: Sequence[BaseAgentEvent | BaseChatMessage]) -> StopMessage | None:
        if self.terminated:
            raise RuntimeError("Termination condition has already been reached")
        stops: list[StopMessage] = []
        for condition in self._conditions:  # a loop, not a comprehension: no function call of its own
            if (stop := await condition(messages)) is not None:
                stops.append(stop)
        if not stops:
            return None
        if len(stops) == 1:  # what the stock condition builds again, its content and source the same
            return stops[0]
        return StopMessage(id=new_message_id(),  # not uuid4's (a system call and a UUID object): _ids.new_message_id
                           content=", ".join(stop.content for stop in stops), source=", ".join(stop.source for stop in stops),
                           metadata={})  # given, not the default pydantic deep-copies (copy.deepcopy: ~12 calls)


class _InTurnSourceMatch(SourceMatchTermination):
    # SourceMatchTermination as Duet's served termination asks it (_InTurnOr): its stop message's id from
    # _ids.new_message_id, not uuid4's default factory (a system call, a UUID object and its str). The stock
    # docstring, label and provider: it dumps as the stock condition.
    __doc__ = SourceMatchTermination.__doc__
    component_label = "SourceMatchTermination"

    async def __call__(self, messages: Sequence[BaseAgentEvent | BaseChatMessage]) -> StopMessage | None:
        # Mirrors SourceMatchTermination.__call__ of autogen-agentchat 0.7.5 (pinned).
        if self._terminated:
            raise TerminatedException("Termination condition has already been reached")
        for message in messages:
            if message.source in self._sources:
                self._terminated = True
                return StopMessage(id=new_message_id(), content=f"'{message.source}' answered", source="SourceMatchTermination",
                                   metadata={})  # given, not the default pydantic deep-copies (see _InTurnOr)
        return None


class _InTurnHandoff(HandoffTermination):
    # HandoffTermination as Duet's served termination asks it (_InTurnOr), on every run that ends in client
    # tool calls or a failure: its stop message's id from _ids.new_message_id, not uuid4's default factory.
    # The stock docstring, label and provider: it dumps as the stock condition.
    __doc__ = HandoffTermination.__doc__
    component_label = "HandoffTermination"

    async def __call__(self, messages: Sequence[BaseAgentEvent | BaseChatMessage]) -> StopMessage | None:
        # Mirrors HandoffTermination.__call__ of autogen-agentchat 0.7.5 (pinned).
        if self._terminated:
            raise TerminatedException("Termination condition has already been reached")
        for message in messages:
            if isinstance(message, HandoffMessage) and message.target == self._target:
                self._terminated = True
                return StopMessage(id=new_message_id(), content=f"Handoff to {self._target} from {message.source} detected.",
                                   source="HandoffTermination", metadata={})  # not the default pydantic deep-copies (see _InTurnOr)
        return None


def _in_turn(condition: TerminationCondition) -> TerminationCondition:
    """``condition``, or its in-turn kind when it is a stock ``SourceMatchTermination`` or ``HandoffTermination``."""
    if type(condition) is SourceMatchTermination:
        return _InTurnSourceMatch(condition._sources)  # its list of sources
    if type(condition) is HandoffTermination:
        return _InTurnHandoff(condition._target)
    return condition


class _ContainerMaker:
    """``TurnContainer(parent_topic_type, output_topic_type, agent, message_factory)``: the factory of one of
    a served team's agent containers, which its runtime keeps for as long as the team. A partial object of
    the same call keeps the arguments in a tuple, and an empty keyword dict besides (~225 bytes); these
    four slots, ~80."""

    __slots__ = ("parent_topic_type", "output_topic_type", "agent", "message_factory")
    func = TurnContainer  # what it makes (as a partial object's func)

    def __init__(self, parent_topic_type: str, output_topic_type: str, agent: Any, message_factory: MessageFactory) -> None:
        self.parent_topic_type = parent_topic_type
        self.output_topic_type = output_topic_type
        self.agent = agent
        self.message_factory = message_factory

    def __call__(self) -> TurnContainer:
        return TurnContainer(self.parent_topic_type, self.output_topic_type, self.agent, self.message_factory)


class _RoundRobinTeam(RoundRobinGroupChat):
    # Duet's team as served, with Duet's agent container and group chat manager (_group_chat.py), its
    # subscriptions added through a TeamRegistration (lean, no uuid string each). The runtime keeps
    # the factory of each of the team's agents for as long as the team, and AgentChat
    # (0.7.5, pinned) makes each a closure (a function and a cell per argument, eleven for the
    # manager); these are the same calls: a container's in four slots (_ContainerMaker), the manager's
    # a partial object. The stock docstring and label: it dumps as the stock team.
    __doc__ = RoundRobinGroupChat.__doc__
    component_label = "RoundRobinGroupChat"

    def _create_participant_factory(self, parent_topic_type: str, output_topic_type: str, agent: Any,
                                    message_factory: MessageFactory) -> Any:
        return _ContainerMaker(parent_topic_type, output_topic_type, agent, message_factory)

    def _create_group_chat_manager_factory(self, *arguments: Any, **named: Any) -> Any:
        return functools.partial(RoundRobinManager, *_manager_arguments(*arguments, **named), self._emit_team_events)  # type: ignore[call-arg]  # the ten, then emit_team_events

    _shared_subscriptions: dict[tuple[Any, str, str], Subscription] | None = None  # its factory's (_share_names)

    async def _init(self, runtime: AgentRuntime) -> None:
        # Mirrors BaseGroupChat._init of autogen-agentchat 0.7.5 (pinned), registering Duet's container and
        # manager classes (which find their handlers once: _group_chat.py) where it registers AgentChat's; on
        # the runtime, its subscriptions lean, and those of its factory's earlier teams reused.
        registration = TeamRegistration(runtime, self._shared_subscriptions)
        group_topic = self._group_topic_type
        for participant, agent_type in zip(self._participants, self._participant_topic_types, strict=True):
            maker = self._create_participant_factory(group_topic, self._output_topic_type, participant, self._message_factory)
            await TurnContainer.register(registration, type=agent_type, factory=maker)
            await registration.add_type_subscription(agent_type, agent_type)
            await registration.add_type_subscription(group_topic, agent_type)
        manager_type = self._group_chat_manager_topic_type
        manager = self._create_group_chat_manager_factory(
            name=self._group_chat_manager_name, group_topic_type=group_topic, output_topic_type=self._output_topic_type,
            participant_names=self._participant_names, participant_topic_types=self._participant_topic_types,
            participant_descriptions=self._participant_descriptions, output_message_queue=self._output_message_queue,
            termination_condition=self._termination_condition, max_turns=self._max_turns, message_factory=self._message_factory)
        await RoundRobinManager.register(registration, type=manager_type, factory=manager)
        for topic in (manager_type, group_topic, self._output_topic_type):
            await registration.add_type_subscription(topic, manager_type)
        self._initialized = True


_TEAM_NAMES = ("_team_id", "_group_topic_type", "_group_chat_manager_topic_type", "_participant_topic_types",
               "_output_topic_type", "_participant_names", "_participant_descriptions")
"""What AgentChat's ``BaseGroupChat.__init__`` (0.7.5, pinned) names a team's agents and topics by, made
anew for every team (a uuid4 team id in every topic and agent type) and never changed after it."""


def _manager_arguments(name: str, group_topic_type: str, output_topic_type: str, participant_topic_types: list[str],
                       participant_names: list[str], participant_descriptions: list[str], output_message_queue: Any,
                       termination_condition: TerminationCondition | None, max_turns: int | None,
                       message_factory: MessageFactory) -> tuple[Any, ...]:
    """The arguments of ``_create_group_chat_manager_factory`` (passed by name), in the order of
    AgentChat's ``RoundRobinGroupChatManager``'s."""
    return (name, group_topic_type, output_topic_type, participant_topic_types, participant_names, participant_descriptions,
            output_message_queue, termination_condition, max_turns, message_factory)


@dataclass(frozen=True, slots=True)
class _Participant:
    """One of Duet's agents in the team: made from ``config``, with ``shared_client`` or, when that
    is None, a client of its own loaded from the config for each team."""

    kind: type[DuetAgent]
    config: DuetAgentConfig
    shared_client: ChatCompletionClient | None

    def client(self) -> ChatCompletionClient | None:
        if self.shared_client is not None:
            return self.shared_client
        model_client = getattr(self.config, "model_client", None)  # the grounding agent calls no model
        return ChatCompletionClient.load_component(model_client) if model_client is not None else None


class TeamFactory:
    """Makes the teams of one served pipeline from its team component: the team of a team file, or
    the component a pipeline's settings describe (:meth:`from_settings`).

    A ``RoundRobinGroupChat`` of Duet's own agents (what :func:`~duet.agents.build_team` and
    :func:`~duet.agents.export_team` make, and what AutoGen Studio keeps when it edits such a file)
    is made fast: each call makes Duet's agents from their configs in a new ``RoundRobinGroupChat``
    on a :class:`~duet.agents.runtime.LeanAgentRuntime` of its own (started for each run). A model
    client made for concurrent use (:func:`made_for_concurrent_use`) is created once, here, and
    shared by every team; any other client is loaded for each team and closed with its
    :class:`~duet.agents.pipeline._pool.TeamSlot`. A settings pipeline's teams share the clients its settings made.

    Any other team (another team type, or a participant that is not one of Duet's agents, such as
    an ``AssistantAgent`` added in AutoGen Studio) is loaded whole from the component for every
    team, on AgentChat's embedded runtime, with model clients of its own.

    Everything is loaded once when the factory is made, so a broken component fails here, with an
    error naming the provider that broke (:class:`~duet.agents.TeamLoadError`). The factory owns
    the shared clients and the team it made to check the component until a request leases it:
    :meth:`close` closes them.
    """

    def __init__(
        self,
        config: ComponentModel,
        model_clients: Mapping[str, ChatCompletionClient] | None = None,
        *,
        origin: str = "component",
    ) -> None:
        """``model_clients``: the clients of participants by name, already made (a settings
        pipeline's), shared by every team and owned by the factory from here on (closed by
        :meth:`close`, or at once if the component does not load); a participant not named gets
        the client its config describes."""
        self._config = config
        self._origin = origin
        self._team: RoundRobinGroupChatConfig | None = None
        self._message_factory: MessageFactory | None = None  # the first team's, shared by the rest (see _build)
        self._participants: list[_Participant] = []
        self._spare: TeamSlot | None = None  # the team made to check the component, handed out first
        self._names: dict[str, Any] | None = None  # the first team's _TEAM_NAMES, shared by the rest (_share_names)
        self._subscriptions: dict[tuple[Any, str, str], Subscription] = {}  # the lean subscriptions its teams share
        made: list[ChatCompletionClient] = list((model_clients or {}).values())  # closed if loading fails
        try:
            first_clients = self._prepare(model_clients or {}, made)
            if self._team is None:
                self._spare = TeamSlot(load_team(config, origin), owns_agents=True)
            else:
                self._spare = self._duet_slot(first_clients)
        except Exception as exc:
            _close_from_sync_code(made)
            if isinstance(exc, TeamLoadError):
                raise
            raise TeamLoadError(f"cannot load team {origin}: {diagnose(config, exc)}") from exc

    @classmethod
    def from_settings(cls, settings: PipelineSettings) -> "TeamFactory":
        """The factory of a settings pipeline: its model clients are made here, once."""
        clients: dict[str, ChatCompletionClient] = {}
        try:
            clients[ANSWERER_NAME] = settings.answer.build_client(ANSWER_MODEL_INFO)
            if settings.reasoner is not None:
                clients[REASONER_NAME] = settings.reasoner.build_client(REASONER_MODEL_INFO)
            config = build_team(settings, clients[ANSWERER_NAME], clients.get(REASONER_NAME)).dump_component()
        except Exception:
            _close_from_sync_code(clients.values())
            raise
        return cls(config, clients, origin=f"of pipeline '{settings.name}'")

    def _prepare(self, given: Mapping[str, ChatCompletionClient], made: list[ChatCompletionClient]) -> list[ChatCompletionClient | None]:
        """Reads Duet's team type and agents from the component and creates their clients (each
        added to ``made`` at once); returns the clients of the first team. Leaves ``_team`` unset
        for any other team."""
        if self._config.provider not in _DUET_TEAMS:
            return []
        team = RoundRobinGroupChatConfig.model_validate(self._config.config)
        kinds = [_provider_class(participant) for participant in team.participants]
        if any(kind is None for kind in kinds):
            return []
        first_clients: list[ChatCompletionClient | None] = []  # None: an agent that calls no model
        for kind, participant in zip(kinds, team.participants, strict=True):
            assert kind is not None
            config: DuetAgentConfig = kind.component_config_schema.model_validate(participant.config)  # type: ignore[attr-defined]
            client = given.get(config.name)
            if client is None and getattr(config, "model_client", None) is not None:  # the grounding agent has none
                client = ChatCompletionClient.load_component(config.model_client)
                made.append(client)
            shared = client is not None and (config.name in given or made_for_concurrent_use(client))
            self._participants.append(_Participant(kind, config, client if shared else None))
            first_clients.append(client)
        self._team = team
        return first_clients

    def __call__(self) -> TeamSlot:
        """A team for the pool (on its own runtime, unless the team embeds one)."""
        if self._spare is not None:
            slot, self._spare = self._spare, None
            return slot
        if self._team is None:
            return TeamSlot(Team.load_component(self._config), owns_agents=True)
        return self._duet_slot([participant.client() for participant in self._participants])

    def standalone(self) -> Team:
        """A team loaded from the component as AgentChat loads it, on an embedded runtime, to run
        with AgentChat directly or to dump. Its agents have model clients of their own, which the
        factory does not close: closing the agents closes them."""
        return load_team(self._config, self._origin)

    @property
    def model_clients(self) -> list[ChatCompletionClient]:
        """The shared model clients (none for a team loaded whole: its teams own theirs)."""
        unique: dict[int, ChatCompletionClient] = {}
        for participant in self._participants:
            if participant.shared_client is not None:
                unique.setdefault(id(participant.shared_client), participant.shared_client)
        return list(unique.values())

    async def close(self) -> None:
        """Closes the team made to check the component if no request leased it, then the shared
        model clients. Teams handed out are their holders' to close (:meth:`TeamSlot.close`)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            await spare.close()
        for client in self.model_clients:
            await client.close()

    def _duet_slot(self, clients: list[ChatCompletionClient | None]) -> TeamSlot:
        """A team of Duet's agents with ``clients`` (one for each participant) on a runtime of its
        own; the slot owns the clients that are not shared."""
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        own = [client for participant, client in zip(self._participants, clients, strict=True)
               if participant.shared_client is None and client is not None]
        team = self._build(runtime, clients)
        return TeamSlot(team, runtime, own_clients=own, first_speaker=self._first_speaker(team))

    def _first_speaker(self, team: RoundRobinGroupChat) -> DuetAgent | None:
        """The agent a new task certainly goes to first: the first participant, when nothing can end
        the team before it speaks (Duet's own termination, any number of turns)."""
        config = self._team
        assert config is not None
        if config.termination_condition != _DUET_TERMINATION or (config.max_turns is not None and config.max_turns < 1):
            return None
        first = team._participants[0]  # not exported (0.7.5); the team was built from self._participants
        return first if isinstance(first, DuetAgent) else None

    def _build(self, runtime: AgentRuntime, clients: list[ChatCompletionClient | None]) -> RoundRobinGroupChat:
        """As ``RoundRobinGroupChat._from_config``, with ``clients`` and ``runtime``."""
        team = self._team
        assert team is not None
        participants: list[Any] = [
            participant.kind._from_config(participant.config, client)  # type: ignore[attr-defined]
            for participant, client in zip(self._participants, clients, strict=True)
        ]
        termination: TerminationCondition | None
        if team.termination_condition == _DUET_TERMINATION:  # made, not loaded: the same two conditions, no validation
            termination = _InTurnOr(*map(_in_turn, duet_termination()._conditions))  # type: ignore[attr-defined]
        else:
            termination = TerminationCondition.load_component(team.termination_condition) if team.termination_condition else None
        made = _RoundRobinTeam(
            participants,
            name=team.name,
            description=team.description,
            termination_condition=termination,
            max_turns=team.max_turns,
            emit_team_events=team.emit_team_events,
            runtime=runtime,
        )
        self._share_names(made)
        made._output_message_queue = lighten_queue(HandOverQueue())  # not exported (AgentChat 0.7.5): held by every pooled team
        # The teams' message factories are the same (the same participants, no custom types) and nothing
        # changes one after the team is made: one for all (not exported; AgentChat 0.7.5, pinned).
        if self._message_factory is None:
            self._message_factory = made._message_factory
        made._message_factory = self._message_factory
        return made

    def _share_names(self, team: _RoundRobinTeam) -> None:
        """Gives ``team`` the first team's team id, topic types and name lists (:data:`_TEAM_NAMES`), and
        the subscriptions they make (:class:`~duet.agents.runtime.TeamRegistration`): each of a pipeline's
        teams runs on a runtime of its own, where its team id (the key of its agents, the suffix of its
        topic and agent types) need not differ from another team's. What a team keeps for as long as its
        pool keeps it, and so every stream in flight, is then about 1.6 KB less (tracemalloc)."""
        if self._names is None:
            self._names = {name: getattr(team, name) for name in _TEAM_NAMES}
        else:
            for name, value in self._names.items():
                setattr(team, name, value)
        team._shared_subscriptions = self._subscriptions
