"""The team factory (``agents/pipeline/_team_factory.py``): shared clients for Duet's own, a client per
team for any other kind, the lean runtime, closing, loading other teams whole, naming the provider that
broke."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import aiohttp
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import ComponentModel
from autogen_core.models import (
    ChatCompletionClient,
)
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.models.replay import ReplayChatCompletionClient
from duet.agents import (
    ANSWERER_NAME,
    AnswerSettings,
    OpenAICompatibleClient,
    PipelineSettings,
    ReasonerSettings,
    TeamLoadError,
    UpstreamError,
    build_team,
)
from duet.agents._messages import (
    AnswerReply,
    ReasoningReply,
    read_reply,
    task_messages,
)
from duet.agents._run import bind_run
from duet.agents.pipeline import TeamFactory
from duet.agents.pipeline._pool import TeamSlot
from duet.agents.runtime import LeanAgentRuntime
from duet.agents.upstream import ANSWER_MODEL_INFO

from tests.core_parts import CONVERSATION, collecting_run


def _participants(slot: TeamSlot) -> list[Any]:
    return list(slot.team._participants)  # type: ignore[attr-defined]  # AgentChat has no public accessor


NOBODY_LISTENS = "http://127.0.0.1:1/v1"


def _lean(model: str) -> OpenAICompatibleClient:
    return OpenAICompatibleClient(model, NOBODY_LISTENS)


class CustomOpenAIClient(OpenAIChatCompletionClient):
    """A client of the tests' own, a subclass of AutoGen's OpenAI client: custom code, which a team
    factory does not share. Keeps every instance made (a factory makes them from a component)."""

    component_provider_override = "tests.unit.agents.pipeline.test_team_factory.CustomOpenAIClient"
    made: ClassVar[list["CustomOpenAIClient"]] = []

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        CustomOpenAIClient.made.append(self)

    @property
    def closed(self) -> bool:
        return self._client.is_closed()  # the openai SDK client it made at once (its HTTP connection pool)


def _custom(model: str) -> CustomOpenAIClient:
    return CustomOpenAIClient(model=model, base_url=NOBODY_LISTENS, api_key="unused", model_info=ANSWER_MODEL_INFO)


async def _session_of(client: ChatCompletionClient) -> aiohttp.ClientSession:
    """The connection pool of Duet's client, made by a readiness check (which fails: nobody listens)."""
    assert isinstance(client, OpenAICompatibleClient)
    with pytest.raises(UpstreamError):
        await client.check_ready(5)
    assert client._session is not None and not client._session.closed
    return client._session


async def _replies_of_a_run(slot: TeamSlot) -> list[Any]:
    """The replies of one run of ``slot``'s team on its runtime (started for the run, stopped after)."""
    assert slot.runtime is not None
    with bind_run(collecting_run([])):
        slot.runtime.start()
        replies = [read_reply(m) async for m in slot.team.run_stream(task=task_messages(list(CONVERSATION)), output_task_messages=False)]
    await slot.runtime.stop_when_idle()
    return replies


def _component(reasoner: ChatCompletionClient | None = None, answer: ChatCompletionClient | None = None) -> ComponentModel:
    """Duet's team, as a team file holds it; AutoGen's replay clients unless told otherwise."""
    settings = PipelineSettings(reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))
    answer = answer or ReplayChatCompletionClient(["done"])
    return build_team(settings, answer, reasoner or ReplayChatCompletionClient(["plan"])).dump_component()


def test_team_factory_shares_clients_made_for_concurrent_use_and_runs_duet_teams_on_the_lean_runtime() -> None:
    stock = OpenAIChatCompletionClient(model="a", base_url=NOBODY_LISTENS, api_key="unused", model_info=ANSWER_MODEL_INFO)
    component = _component(reasoner=_lean("r"), answer=stock)  # Duet's client and AutoGen's OpenAI client
    factory = TeamFactory(component, origin="test")
    slots = [factory() for _ in range(3)]
    assert all(isinstance(slot.runtime, LeanAgentRuntime) and not slot.owns_agents and not slot.own_clients for slot in slots)
    assert len({id(slot.team) for slot in slots}) == 3 and len({id(slot.runtime) for slot in slots}) == 3
    clients = [[agent.model_client for agent in _participants(slot)] for slot in slots]
    assert all(c[0] is clients[0][0] and c[1] is clients[0][1] for c in clients)  # created once, shared
    assert factory.model_clients == clients[0]
    assert [type(client) for client in clients[0]] == [OpenAICompatibleClient, OpenAIChatCompletionClient]
    assert slots[0].team.dump_component() == component  # the same team, rebuilt

    settings = PipelineSettings(name="p", reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))
    from_settings = TeamFactory.from_settings(settings)
    slot = from_settings()
    assert [agent.model_client for agent in _participants(slot)] == from_settings.model_clients  # the clients it made
    assert [agent.model_client.dump_component().config["model"] for agent in _participants(slot)] == ["r", "a"]


def test_team_factory_gives_each_team_its_own_client_of_any_other_kind() -> None:
    """A team file whose answer agent uses AutoGen's ReplayChatCompletionClient (which replays a
    script, so each team needs its own) beside Duet's client (shared)."""
    factory = TeamFactory(_component(reasoner=_lean("r"), answer=ReplayChatCompletionClient(["Sunny today."])))
    slots = [factory() for _ in range(3)]
    reasoners = [_participants(slot)[0].model_client for slot in slots]
    answerers = [_participants(slot)[1].model_client for slot in slots]
    assert all(client is reasoners[0] for client in reasoners) and factory.model_clients == [reasoners[0]]
    assert len({id(client) for client in answerers}) == 3 and all(type(c) is ReplayChatCompletionClient for c in answerers)
    assert [list(slot.own_clients) for slot in slots] == [[client] for client in answerers]  # each closes with its team

    # Two teams run one after the other: each replays the script from its start.
    scripted = TeamFactory(_component(answer=ReplayChatCompletionClient(["Sunny today."])))

    async def main() -> list[list[Any]]:
        replies: list[list[Any]] = []
        for slot in (scripted(), scripted()):
            assert slot.runtime is not None
            with bind_run(collecting_run([])):
                slot.runtime.start()
                task = task_messages(list(CONVERSATION))
                replies.append([read_reply(m) async for m in slot.team.run_stream(task=task, output_task_messages=False)])
            await slot.runtime.stop_when_idle()
        return replies

    assert asyncio.run(main()) == [[ReasoningReply("plan"), AnswerReply("Sunny today.", "stop"), None]] * 2


def test_a_served_team_keeps_its_agents_factories_as_partial_calls_and_dumps_as_the_stock_team() -> None:
    """The runtime keeps the factory of each of a team's agents for as long as the team: calls of the
    classes (Duet's subclasses of AgentChat's) kept in slots for a container, a partial call for the
    manager, not AgentChat's closures; the team still runs and dumps as the stock one."""
    import functools

    from autogen_agentchat.teams._group_chat._chat_agent_container import (
        ChatAgentContainer,
    )
    from autogen_agentchat.teams._group_chat._round_robin_group_chat import (
        RoundRobinGroupChatManager,
    )
    from duet.agents.pipeline._group_chat import RoundRobinManager, TurnContainer
    from duet.agents.pipeline._team import duet_termination

    component = _component(answer=ReplayChatCompletionClient(["Sunny today."]))
    slot = TeamFactory(component)()

    assert asyncio.run(_replies_of_a_run(slot)) == [ReasoningReply("plan"), AnswerReply("Sunny today.", "stop"), None]
    made = [factory.make for factory in slot.runtime._agent_factories.values()]  # type: ignore[union-attr]
    from duet.agents.pipeline._team_factory import _ContainerMaker

    assert sorted(type(make).__name__ for make in made) == ["_ContainerMaker"] * 2 + ["partial"]
    assert all(not hasattr(make, "__dict__") for make in made if isinstance(make, _ContainerMaker))  # slots only
    assert all(isinstance(make, (functools.partial, _ContainerMaker)) for make in made)
    assert sorted(make.func.__name__ for make in made) == sorted([TurnContainer.__name__] * 2 + [RoundRobinManager.__name__])
    assert issubclass(TurnContainer, ChatAgentContainer) and issubclass(RoundRobinManager, RoundRobinGroupChatManager)  # Duet's own
    assert slot.team.dump_component() == RoundRobinGroupChat.load_component(component).dump_component() == component
    # Duet's termination is made, not loaded from the component (no validation per team): the same two conditions.
    conditions = slot.team._termination_condition._conditions  # type: ignore[union-attr]
    assert [condition.dump_component() for condition in conditions] == [c.dump_component() for c in duet_termination()._conditions]
    assert not any(condition.terminated for condition in conditions)


def test_a_factorys_teams_share_their_names_and_subscriptions_and_run_at_once_each_on_its_runtime() -> None:
    """A pipeline's teams each run on a runtime of their own: they share the first team's team id, topic
    and agent types, name lists and the lean subscriptions these make (kept once for all, not per team),
    and two of them still run at the same time, each with its own replies."""
    component = _component(answer=ReplayChatCompletionClient(["Sunny today."]))
    factory = TeamFactory(component)
    slots = [factory() for _ in range(3)]

    async def main() -> list[list[Any]]:
        return list(await asyncio.wait_for(asyncio.gather(*(_replies_of_a_run(slot) for slot in slots)), 10))

    assert asyncio.run(main()) == [[ReasoningReply("plan"), AnswerReply("Sunny today.", "stop"), None]] * 3
    first, *others = [slot.team for slot in slots]
    for team in others:
        assert team._team_id is first._team_id and team._participant_topic_types is first._participant_topic_types  # type: ignore[attr-defined]
        assert team._group_topic_type is first._group_topic_type and team._output_topic_type is first._output_topic_type  # type: ignore[attr-defined]
    subscriptions = [slot.runtime._subscription_manager.subscriptions for slot in slots]  # type: ignore[union-attr]
    assert len(subscriptions[0]) == 10 and all(subscription._id is None for subscription in subscriptions[0])
    assert all(mine is theirs for other in subscriptions[1:] for mine, theirs in zip(other, subscriptions[0], strict=True))
    assert len({id(slot.runtime._subscription_manager._subscriptions) for slot in slots}) == 3  # type: ignore[union-attr]  # a list each
    assert slots[1].team.dump_component() == component  # still the same team, dumped


def test_a_new_teams_first_run_finds_its_agents_handlers_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """autogen-core finds a routed agent's message handlers by walking its class's attributes, for each
    agent it makes and each class it registers: six walks at every new team's first run, what a worker
    pays for each stream above the teams it keeps. Duet's container and manager classes walk once; a
    stock team still walks as AgentChat does."""
    from autogen_core import RoutedAgent, SingleThreadedAgentRuntime

    walked: list[str] = []
    stock = RoutedAgent._discover_handlers.__func__  # type: ignore[attr-defined]

    def counted(cls: type) -> Any:
        walked.append(cls.__name__)
        return stock(cls)

    monkeypatch.setattr(RoutedAgent, "_discover_handlers", classmethod(counted))  # this test's spy, undone after it
    from duet.agents.pipeline import _group_chat

    monkeypatch.setattr(_group_chat, "_found_handlers", {})  # as in a new process
    monkeypatch.setattr(_group_chat, "_handled_types", {})
    factory = TeamFactory(_component(answer=ReplayChatCompletionClient(["Sunny today."] * 3)))
    slots = [factory() for _ in range(3)]

    async def main() -> list[list[Any]]:
        return list(await asyncio.wait_for(asyncio.gather(*(_replies_of_a_run(slot) for slot in slots)), 10))

    assert asyncio.run(main()) == [[ReasoningReply("plan"), AnswerReply("Sunny today.", "stop"), None]] * 3
    assert sorted(walked) == ["RoundRobinManager", "TurnContainer"]  # once each, for three teams made and registered
    walked.clear()

    async def stock_team() -> None:
        team = RoundRobinGroupChat([AssistantAgent("first", ReplayChatCompletionClient(["one"]))],
                                   termination_condition=MaxMessageTermination(2), runtime=SingleThreadedAgentRuntime())
        team._runtime.start()  # type: ignore[attr-defined]
        await asyncio.wait_for(team.run(task="go"), 5)
        await team._runtime.stop_when_idle()  # type: ignore[attr-defined]

    asyncio.run(stock_team())
    assert "ChatAgentContainer" in walked and "RoundRobinGroupChatManager" in walked


def test_team_factory_close_closes_the_shared_clients_and_the_team_no_request_leased() -> None:
    async def main() -> None:
        component = _component(reasoner=_lean("r"), answer=_custom("a"))
        CustomOpenAIClient.made.clear()
        factory = TeamFactory(component)
        [spare_client] = CustomOpenAIClient.made  # the answer client of the team made to check the component
        shared = await _session_of(factory.model_clients[0])
        await factory.close()
        assert shared.closed and spare_client.closed

        # Teams handed out are their holders': a slot closes its own clients, never a shared one.
        factory = TeamFactory(component)
        first, second = factory(), factory()
        shared = await _session_of(factory.model_clients[0])
        [first_client], [second_client] = first.own_clients, second.own_clients
        await second.close()
        assert second_client.closed and not first_client.closed and not shared.closed  # type: ignore[attr-defined]
        await factory.close()
        assert shared.closed and not first_client.closed  # type: ignore[attr-defined]
        await first.close()
        assert first_client.closed  # type: ignore[attr-defined]

        # A team loaded whole: the unleased one's agents close, and with them their clients.
        CustomOpenAIClient.made.clear()
        whole = RoundRobinGroupChat([AssistantAgent("helper", _custom("a"))], termination_condition=MaxMessageTermination(2))
        factory = TeamFactory(whole.dump_component())
        spare_client = CustomOpenAIClient.made[-1]
        await factory.close()
        assert spare_client.closed

    asyncio.run(main())


def test_a_team_factory_that_fails_to_load_closes_the_clients_it_made() -> None:
    """The reasoner's client is loaded from the component, the answer client is given (as a
    settings pipeline gives it); the termination condition then fails to load."""
    broken = _component(reasoner=_custom("r")).model_dump()
    broken["config"]["termination_condition"]["provider"] = "no_such_package.Condition"

    async def main() -> tuple[aiohttp.ClientSession, list[CustomOpenAIClient]]:
        given = _lean("a")
        session = await _session_of(given)
        CustomOpenAIClient.made.clear()
        with pytest.raises(TeamLoadError, match=r"provider 'no_such_package\.Condition' \(termination\) cannot be imported"):
            TeamFactory(ComponentModel.model_validate(broken), {ANSWERER_NAME: given})
        return session, list(CustomOpenAIClient.made)

    session, loaded = asyncio.run(main())
    assert session.closed and len(loaded) == 1 and loaded[0].closed


def test_a_standalone_team_has_clients_of_its_own() -> None:
    """What ``Duet.new_team()`` hands out: closing its agents leaves the pipeline's clients open."""
    component = _component(reasoner=_lean("r"), answer=_lean("a"))
    factory = TeamFactory(component)
    team = factory.standalone()
    agents = list(team._participants)  # type: ignore[attr-defined]
    assert team.dump_component() == component
    assert not {id(agent.model_client) for agent in agents} & {id(client) for client in factory.model_clients}

    async def main() -> list[aiohttp.ClientSession]:
        shared = [await _session_of(client) for client in factory.model_clients]
        for agent in agents:
            await agent.close()
        return shared

    assert not any(session.closed for session in asyncio.run(main()))


def test_team_factory_loads_other_teams_whole() -> None:
    """A team with a participant that is not one of Duet's agents (Studio's AssistantAgent)."""
    component = RoundRobinGroupChat(
        [AssistantAgent("helper", ReplayChatCompletionClient(["hi"]))], termination_condition=MaxMessageTermination(2)
    ).dump_component()
    factory = TeamFactory(component)
    slots = [factory(), factory()]
    assert all(slot.runtime is None and slot.owns_agents for slot in slots)  # AgentChat's embedded runtime, its own agents
    assert _participants(slots[0])[0].name == "helper" and _participants(slots[0])[0] is not _participants(slots[1])[0]
    assert factory.model_clients == []


def test_team_factory_names_the_provider_that_broke() -> None:
    broken = _component().model_dump()
    broken["config"]["participants"][1]["config"]["model_client"]["provider"] = "no_such_package.Client"
    with pytest.raises(TeamLoadError, match=r"cannot load team broken\.json: provider 'no_such_package\.Client' \(replay_chat_completion_client\) cannot be imported"):
        TeamFactory(ComponentModel.model_validate(broken), origin="broken.json")
    bad_field = _component().model_dump()
    bad_field["config"]["participants"][0]["config"]["max_reasoning_chars"] = -1
    with pytest.raises(TeamLoadError, match=r"provider 'duet\.agents\.ReasoningAgent' \(agent\) failed to load"):
        TeamFactory(ComponentModel.model_validate(bad_field))


async def _stops_as_stock(served: Any, stock: Any, messages: list[Any], condition: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``served`` stops on ``messages`` as ``stock`` does (the stop message's content and source), with an
    id drawn while ``uuid4`` is forbidden (UUID-shaped); ``condition``, the one that stopped, refuses to
    be asked again, and a reset makes ``served`` ready for the next run."""
    import uuid

    from autogen_agentchat.base import TerminatedException

    stop = await served(messages)
    monkeypatch.undo()
    expected = await stock(messages)
    assert stop is not None and expected is not None and (stop.content, stop.source) == (expected.content, expected.source)
    assert len(stop.id) == len(str(uuid.uuid4())) and served.terminated
    with pytest.raises(TerminatedException):
        await condition(messages)
    await served.reset()
    assert not served.terminated


def test_the_served_termination_stops_as_the_stock_one_with_an_id_drawn_without_uuid4(monkeypatch: pytest.MonkeyPatch) -> None:
    """Duet's termination as served (made, in turn): the answer's source stops it with the stock stop
    message's content and source, and an id of ``new_message_id``'s (UUID-shaped), not a ``uuid4``."""
    import uuid

    from autogen_agentchat.messages import TextMessage
    from duet.agents._names import ANSWERER_NAME, REASONER_NAME
    from duet.agents.pipeline._team import duet_termination

    slot = TeamFactory(_component(answer=ReplayChatCompletionClient(["hi"])))()
    served, stock = slot.team._termination_condition, duet_termination()  # type: ignore[attr-defined]
    monkeypatch.setattr(uuid, "uuid4", lambda: pytest.fail("uuid4 drawn"))

    async def main() -> None:
        assert await served([TextMessage(id="r", source=REASONER_NAME, content="plan")]) is None
        answer = [TextMessage(id="a", source=ANSWERER_NAME, content="hi")]
        await _stops_as_stock(served, stock, answer, served._conditions[1], monkeypatch)

    asyncio.run(main())


def test_the_served_termination_stops_on_a_handoff_to_the_client_as_the_stock_one_without_uuid4(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ends in client tool calls (or a failure) hands off to the client: the served termination
    stops it with the stock stop message's content and source, and no ``uuid4`` is drawn for it."""
    import uuid

    from autogen_agentchat.messages import HandoffMessage
    from duet.agents._names import CLIENT, REASONER_NAME
    from duet.agents.pipeline._team import duet_termination

    slot = TeamFactory(_component(answer=ReplayChatCompletionClient(["hi"])))()
    served, stock = slot.team._termination_condition, duet_termination()  # type: ignore[attr-defined]
    monkeypatch.setattr(uuid, "uuid4", lambda: pytest.fail("uuid4 drawn"))

    async def main() -> None:
        elsewhere = [HandoffMessage(id="h", source=REASONER_NAME, target="someone", content="over to you")]
        assert await served(elsewhere) is None
        handoff = [HandoffMessage(id="c", source=REASONER_NAME, target=CLIENT, content="failed")]
        await _stops_as_stock(served, stock, handoff, served._conditions[0], monkeypatch)
        assert await served(elsewhere) is None

    asyncio.run(main())


def test_the_served_termination_makes_its_stop_messages_without_deep_copying_a_default() -> None:
    """The served termination's stop messages (the answer's, the client handoff's, and both joined
    when a handoff comes from the answerer) are given their ``metadata``: pydantic deep-copies a
    mutable default for every message made without it (``copy.deepcopy``: ~12 Python calls). They
    carry what the stock ones carry (empty metadata, the same content and source)."""
    import sys

    from autogen_agentchat.messages import HandoffMessage
    from duet.agents._names import ANSWERER_NAME, CLIENT
    from duet.agents.pipeline._team import duet_termination

    slot = TeamFactory(_component(answer=ReplayChatCompletionClient(["hi"])))()
    served, stock = slot.team._termination_condition, duet_termination()  # type: ignore[attr-defined]
    handoff = [HandoffMessage(id="c", source=ANSWERER_NAME, target=CLIENT, content="calls")]
    copies: list[str] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "deepcopy":
            copies.append(frame.f_code.co_filename)

    async def main() -> tuple[Any, Any]:
        sys.setprofile(watch)
        try:
            stop = await served(handoff)
        finally:
            sys.setprofile(None)
        return stop, await stock(handoff)

    stop, expected = asyncio.run(main())
    assert copies == []
    assert (stop.content, stop.source, stop.metadata) == (expected.content, expected.source, expected.metadata) == (
        expected.content, "HandoffTermination, SourceMatchTermination", {})
