"""Duet's group chat (``agents/pipeline/_group_chat.py``): agent spans only with a tracer provider, one
shared request message for every turn."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from autogen_core import SingleThreadedAgentRuntime
from duet.agents.pipeline import _group_chat
from duet.agents.runtime import LeanAgentRuntime

from tests.core_parts import run_a_team_on


def test_duets_team_opens_its_agent_spans_only_when_a_tracer_provider_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a tracer provider the span around an agent's turn in Duet's team costs nothing (every
    span would be a no-op): AgentChat's span helper is not called, while a stock team calls it for each
    turn; with a provider, Duet's team opens and records it as AgentChat does."""
    from autogen_agentchat.teams._group_chat import _chat_agent_container
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    spans_opened: list[str] = []
    stock_span = _chat_agent_container.trace_invoke_agent_span

    def counted_span(**named: Any) -> Any:
        spans_opened.append(named["agent_name"])
        return stock_span(**named)

    monkeypatch.setattr(_chat_agent_container, "trace_invoke_agent_span", counted_span)  # this test's spy, undone after it
    for runtime in (LeanAgentRuntime, SingleThreadedAgentRuntime):
        assert asyncio.run(run_a_team_on(runtime(ignore_unhandled_exceptions=False), duet_team=True)) == ["user", "first", "second"]
    assert spans_opened == []
    assert asyncio.run(run_a_team_on(SingleThreadedAgentRuntime(ignore_unhandled_exceptions=False))) == ["user", "first", "second"]
    assert spans_opened == ["first", "second"]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # where trace.set_tracer_provider keeps it (set once a process)
    assert asyncio.run(run_a_team_on(LeanAgentRuntime(ignore_unhandled_exceptions=False), duet_team=True)) == ["user", "first", "second"]
    assert spans_opened == ["first", "second"] * 2
    assert [span.name for span in exporter.get_finished_spans() if span.name.startswith("invoke_agent")] == [
        "invoke_agent first", "invoke_agent second"]


def test_a_tracer_provider_set_after_the_team_was_made_counts_from_the_next_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a turn records AgentChat's spans is asked of OpenTelemetry at each turn (where
    ``trace.set_tracer_provider`` keeps it), not remembered."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)  # none set (whatever ran before): undone after the test
    assert not _group_chat._spans_recorded()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", TracerProvider())
    assert _group_chat._spans_recorded()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", trace.NoOpTracerProvider())
    assert not _group_chat._spans_recorded()


def test_every_turn_of_duets_team_is_requested_with_one_shared_message() -> None:
    """The group chat manager of Duet's team asks each speaker for its turn with a message that has
    no fields: one instance serves every turn of every team (it cannot take an attribute), and teams
    run as before, on the lean runtime and the stock one; a stock team makes one for each turn."""
    from autogen_agentchat.teams._group_chat._events import GroupChatRequestPublish

    requests: list[Any] = []

    def recording(kind: type[SingleThreadedAgentRuntime]) -> SingleThreadedAgentRuntime:
        class Recording(kind):  # type: ignore[valid-type, misc]
            async def publish_message(self, message: Any, *args: Any, **kwargs: Any) -> None:
                if isinstance(message, GroupChatRequestPublish):
                    requests.append(message)
                await super().publish_message(message, *args, **kwargs)

        return Recording(ignore_unhandled_exceptions=False)

    for kind in (LeanAgentRuntime, SingleThreadedAgentRuntime):
        assert asyncio.run(run_a_team_on(recording(kind), duet_team=True)) == ["user", "first", "second"]
    assert len(requests) == 4 and all(type(request) is GroupChatRequestPublish for request in requests)
    assert all(request is requests[0] for request in requests)
    with pytest.raises(ValueError, match="no field"):
        requests[0].text = "changed"
    shared = requests[0]
    requests.clear()
    for kind in (LeanAgentRuntime, SingleThreadedAgentRuntime):
        assert asyncio.run(run_a_team_on(recording(kind))) == ["user", "first", "second"]
    assert len(requests) == 4 and len({id(request) for request in requests} | {id(shared)}) == 5


def test_duets_round_robin_manager_chooses_the_next_speaker_without_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """AgentChat runs each turn's choice of speaker as a task linked to the run's token; Duet's manager
    asks round-robin's choice in its own task (none made, no callback left on the token), picks the
    same speakers, and a token already cancelled cancels the turn before the choice, as the stock
    method's cancelled future does."""
    from autogen_core import CancellationToken
    from duet.agents.pipeline._group_chat import RoundRobinManager

    chosen_in_tasks: list[str] = []

    stock_ensure_future = asyncio.ensure_future

    def counting(awaitable: Any, **kwargs: Any) -> Any:
        if asyncio.iscoroutine(awaitable) and awaitable.__qualname__.endswith("select_speaker"):
            chosen_in_tasks.append(awaitable.__qualname__)
        return stock_ensure_future(awaitable, **kwargs)

    monkeypatch.setattr(asyncio, "ensure_future", counting)  # this test's spy, undone after it

    async def run(duet_team: bool) -> list[str]:
        return await run_a_team_on(LeanAgentRuntime(ignore_unhandled_exceptions=False), duet_team=duet_team)

    assert asyncio.run(run(duet_team=True)) == ["user", "first", "second"] and chosen_in_tasks == []
    assert asyncio.run(run(duet_team=False)) == ["user", "first", "second"] and len(chosen_in_tasks) == 2

    async def cancelled_turn() -> int:
        manager = RoundRobinManager.__new__(RoundRobinManager)
        manager._next_speaker_index, manager._emit_team_events = 0, False
        token = CancellationToken()
        token.cancel()
        with pytest.raises(asyncio.CancelledError):
            await manager._transition_to_next_speakers(token)
        return manager._next_speaker_index

    assert asyncio.run(cancelled_turn()) == 0  # the choice was not made


def test_duets_team_publishes_what_a_stock_team_publishes_to_the_same_topics() -> None:
    """Duet's container and manager make their topics without the pattern check and publish without
    BaseAgent's coroutine: the same messages go to the same topics, in the same order, as a stock
    team's; each topic is a DefaultTopicId equal to the one the stock code makes, sent by the agent."""
    from autogen_core import DefaultTopicId

    published: list[tuple[str, str]] = []

    class Recording(LeanAgentRuntime):
        async def publish_message(self, message: Any, topic_id: Any, *args: Any, **kwargs: Any) -> None:
            assert type(topic_id) is DefaultTopicId and topic_id == DefaultTopicId(topic_id.type, topic_id.source)
            assert kwargs["sender"] is not None and kwargs["sender"].key == topic_id.source
            published.append((type(message).__name__, topic_id.type[:-37]))  # without "_<the team's uuid>"
            await super().publish_message(message, topic_id, *args, **kwargs)

    assert asyncio.run(run_a_team_on(Recording(ignore_unhandled_exceptions=False), duet_team=True)) == ["user", "first", "second"]
    duets = list(published)
    published.clear()
    assert asyncio.run(run_a_team_on(Recording(ignore_unhandled_exceptions=False))) == ["user", "first", "second"]
    assert duets == published and ("GroupChatMessage", "output_topic") in duets and ("GroupChatAgentResponse", "group_topic") in duets


def test_duets_team_asks_whether_an_agent_is_a_team_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """AgentChat's ``Team`` has typing's protocol metaclass (~8 Python calls an ``isinstance``): Duet's
    container asks whether its agent is a team once per agent class, not at every turn and reset, and
    its turns and resets go on as AgentChat's (the team runs again after its reset, from the start)."""
    import typing

    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import Team
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_ext.models.replay import ReplayChatCompletionClient
    from duet.agents.pipeline._group_chat import is_group_chat, is_team
    from duet.agents.pipeline._team_factory import _RoundRobinTeam

    asked: list[str] = []
    stock = typing._ProtocolMeta.__instancecheck__  # type: ignore[attr-defined]

    def counted(cls: type, instance: object) -> bool:
        if cls is Team:
            asked.append(type(instance).__name__)
        return bool(stock(cls, instance))

    monkeypatch.setattr(typing._ProtocolMeta, "__instancecheck__", counted)  # this test's spy, undone after it

    async def main() -> list[list[str]]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        team = _RoundRobinTeam([AssistantAgent("first", ReplayChatCompletionClient(["one", "three", "five"])),
                                AssistantAgent("second", ReplayChatCompletionClient(["two", "four", "six"]))],
                               termination_condition=MaxMessageTermination(3), runtime=runtime)
        assert is_team(team) and is_group_chat(team) and not is_team(team._participants[0])
        runs = []
        for _ in range(3):
            runtime.start()
            result = await asyncio.wait_for(team.run(task="go"), 5)
            runs.append([f"{message.source}:{message.to_text()}" for message in result.messages])
            await asyncio.wait_for(team.reset(), 5)  # AgentChat's: a reset message to each container
            await runtime.stop_when_idle()
        return runs

    runs = asyncio.run(main())
    assert runs[0] == ["user:go", "first:one", "second:two"] and runs[1] == ["user:go", "first:three", "second:four"]
    assert asked.count("AssistantAgent") <= 1  # 4 a run before: each turn and each reset asked


def test_duets_manager_starts_a_run_without_checking_its_topics_against_the_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group chat manager of Duet's team publishes a run's start (to the output topic, then to
    the group's) with topics made without ``TopicId``'s pattern check (a regex each), as its turns
    are: no team topic is checked in a whole run, where a stock team checks them; who spoke is the same
    (the messages and topics themselves: test_duets_team_publishes_what_a_stock_team_publishes_...)."""
    from autogen_core import _topic

    checked: list[str] = []
    stock = _topic.is_valid_topic_type

    def counted(value: str) -> bool:
        checked.append(value.rsplit("_", 1)[0])
        return stock(value)

    monkeypatch.setattr(_topic, "is_valid_topic_type", counted)  # this test's spy, undone after it
    assert asyncio.run(run_a_team_on(LeanAgentRuntime(ignore_unhandled_exceptions=False), duet_team=True)) == ["user", "first", "second"]
    assert [kind for kind in checked if kind in ("output_topic", "group_topic")] == []
    assert asyncio.run(run_a_team_on(LeanAgentRuntime(ignore_unhandled_exceptions=False))) == ["user", "first", "second"]
    assert "output_topic" in checked and "group_topic" in checked


def test_duets_team_makes_each_topic_once_and_one_start_for_both_topics() -> None:
    """Duet's container and manager keep the topics they make (frozen, equal by their fields): a second
    run of the same team publishes to the very topics of the first, equal to the stock ones; and the
    manager makes one ``GroupChatStart`` for the output topic and the group's, where AgentChat makes
    two equal ones (the output topic's reaches nobody but the manager, who sent it)."""
    from autogen_agentchat.teams._group_chat._events import GroupChatStart
    from autogen_core import DefaultTopicId

    topics: list[Any] = []
    starts: list[Any] = []

    class Recording(LeanAgentRuntime):
        async def publish_message(self, message: Any, topic_id: Any, *args: Any, **kwargs: Any) -> None:
            topics.append(topic_id)
            if type(message) is GroupChatStart:
                starts.append(message)
            await super().publish_message(message, topic_id, *args, **kwargs)

    async def two_runs(runtime: LeanAgentRuntime) -> None:
        from autogen_agentchat.agents import AssistantAgent
        from autogen_agentchat.conditions import MaxMessageTermination
        from autogen_ext.models.replay import ReplayChatCompletionClient
        from duet.agents.pipeline._team_factory import _RoundRobinTeam

        team = _RoundRobinTeam([AssistantAgent("first", ReplayChatCompletionClient(["one", "two"]))],
                               termination_condition=MaxMessageTermination(2), runtime=runtime)
        for _ in range(2):
            runtime.start()
            await asyncio.wait_for(team.run(task="go"), 5)
            await asyncio.wait_for(team.reset(), 5)
            await runtime.stop_when_idle()

    asyncio.run(two_runs(Recording(ignore_unhandled_exceptions=False)))
    half = len(topics) // 2
    assert half > 0 and len(topics) == 2 * half
    assert all(first is second for first, second in zip(topics[:half], topics[half:], strict=True))
    assert all(topic == DefaultTopicId(topic.type, topic.source) for topic in topics)
    assert len(starts) == 4 and starts[0] is starts[1] and starts[2] is starts[3] and starts[0] is not starts[2]


def test_a_duet_agents_turn_in_a_duet_run_is_awaited_without_its_streams_generator(upstream: Any) -> None:
    """In a Duet run an agent's turn yields its reply alone (its events go to the run's reader): Duet's
    team awaits that reply (``DuetAgent.reply_in_run``) instead of iterating ``on_messages_stream``, an
    async generator per turn (issue 28). The run's events and answer are as ever; outside a run (a plain
    AgentChat run of the same team) the turn is streamed as before."""
    from autogen_agentchat.messages import TextMessage
    from duet.agents import AnswerSettings, Duet, PipelineSettings, ReasonerSettings

    from tests.conftest import ANSWER, REASONER
    from tests.scripted_upstream import Reply

    upstream.script(REASONER, Reply(reasoning=["think"]))
    upstream.script(ANSWER, Reply(content=["hello"]))
    made: list[str] = []

    async def main() -> tuple[list[str], list[str]]:
        first_iteration, finalizer = sys.get_asyncgen_hooks()

        def noted(generator: Any) -> None:
            made.append(generator.ag_code.co_name)
            if first_iteration is not None:
                first_iteration(generator)

        sys.set_asyncgen_hooks(noted, finalizer)  # the loop's own are put back as asyncio.run ends
        settings = PipelineSettings(reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
                                    answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER))
        async with Duet.from_settings(settings) as duet:
            kinds = [event.kind async for event in duet.start([{"role": "user", "content": "hi"}])]
            in_run = list(made)
            upstream.script(REASONER, Reply(reasoning=["think"]))
            upstream.script(ANSWER, Reply(content=["hello"]))
            team = duet.new_team()
            result = await team.run(task=TextMessage(content="hi", source="user"))
            assert result.messages[-1].content.endswith("hello")  # type: ignore[union-attr]
            for agent in team._participants:  # type: ignore[attr-defined]
                await agent.close()
        return kinds, in_run

    kinds, in_run = asyncio.run(asyncio.wait_for(main(), 10))
    assert kinds[0] == "reasoning" and kinds[-1] == "done" and "content" in kinds
    assert "on_messages_stream" not in in_run
    assert "on_messages_stream" in made[len(in_run):]  # a plain AgentChat run streams its turns


def test_a_duet_agent_with_a_stream_of_its_own_is_streamed_as_any_agent() -> None:
    """Duet's container awaits a Duet agent's reply in a run only when its turn is streamed as
    DuetAgent's own: a subclass that overrides ``on_messages_stream`` is iterated, as AgentChat does."""
    from duet.agents import AnswerAgent
    from duet.agents.pipeline._group_chat import is_duet_agent

    class OwnStream(AnswerAgent):
        async def on_messages_stream(self, messages: Any, cancellation_token: Any) -> Any:  # type: ignore[override]
            yield None

    assert is_duet_agent(object.__new__(AnswerAgent))
    assert not is_duet_agent(object.__new__(OwnStream))
    assert not is_duet_agent(object())
