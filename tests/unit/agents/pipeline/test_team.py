"""Duet's team (``agents/pipeline/_team.py``) on real AutoGen objects and replayed model clients: a bound
run gets its events, a reset team runs again, a Duet task needs a bound run, a plain AgentChat task does
not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from autogen_agentchat.base import Response
from autogen_agentchat.messages import (
    ModelClientStreamingChunkEvent,
    TextMessage,
)
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_agentchat.teams._group_chat._events import (
    GroupChatAgentResponse,  # not exported (0.7.5)
)
from autogen_core import TopicId
from autogen_ext.models.replay import ReplayChatCompletionClient
from duet.agents import (
    ANSWERER_NAME,
    REASONER_NAME,
    AnswerSettings,
    ContentDelta,
    PipelineSettings,
    ReasonerSettings,
    ReasoningDelta,
    Usage,
    build_team,
)
from duet.agents._messages import (
    AnswerReply,
    ReasoningReply,
    read_reply,
    task_messages,
)
from duet.agents._run import bind_run, current_run
from duet.agents.pipeline._team import reset_team
from duet.agents.runtime import LeanAgentRuntime

from tests.core_parts import CONVERSATION, collecting_run, replayed_team


def test_a_bound_run_gets_the_events_of_a_team_on_its_own_runtime() -> None:
    """The runtime is started inside the binding: its handler tasks see the run, so the agents'
    events reach the run's sink, and the team yields only the replies the driver reads."""
    events: list[Any] = []

    async def main() -> list[Any]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        team = replayed_team(runtime)
        with bind_run(collecting_run(events)):
            runtime.start()
            replies = [read_reply(m) async for m in team.run_stream(task=task_messages(list(CONVERSATION)), output_task_messages=False)]
        await runtime.stop_when_idle()
        assert current_run() is None
        return replies

    replies = asyncio.run(main())
    assert replies == [ReasoningReply("Paris is in France."), AnswerReply("Sunny today.", "stop"), None]  # None: the TaskResult
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Paris is in France."
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Sunny today."
    assert [e.source for e in events if isinstance(e, Usage)] == [REASONER_NAME, ANSWERER_NAME]


@pytest.mark.parametrize("traced", [False, True], ids=["lean", "traced"])
def test_a_team_reset_after_a_run_is_agentchats_and_the_team_runs_again(monkeypatch: pytest.MonkeyPatch, traced: bool) -> None:
    """Right after a run (its runtime still started, its last handlers maybe still pending, as the
    pool settles it), ``reset_team`` on an unwatched lean runtime calls each agent's reset handler
    itself (no runtime message); the team is left as AgentChat's reset leaves it, and runs again. A
    watched runtime (spans) gets AgentChat's reset, one message per agent."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "false" if traced else "true")
    settings = PipelineSettings(reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))

    async def run_once(team: RoundRobinGroupChat, runtime: LeanAgentRuntime) -> list[Any]:
        with bind_run(collecting_run([])):
            runtime.start()
            return [read_reply(m) async for m in team.run_stream(task=task_messages(list(CONVERSATION)), output_task_messages=False)]

    async def agentchats_reset(team: RoundRobinGroupChat, runtime: LeanAgentRuntime) -> None:
        await team.reset()
        await runtime.stop_when_idle()

    async def main(reset: Any) -> tuple[Any, int, list[Any], list[Any]]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        team = build_team(settings, ReplayChatCompletionClient(["Sunny.", "Rain."]), ReplayChatCompletionClient(["Hmm.", "Aha."]), runtime=runtime)
        first = await run_once(team, runtime)
        # A message the run's last handlers still deliver (no turn of the loop has run them yet):
        # the reset must come after it, or the next run would find it in a buffer.
        late = GroupChatAgentResponse(response=Response(chat_message=TextMessage(source=ANSWERER_NAME, content="late")), name=ANSWERER_NAME)
        await runtime.publish_message(late, TopicId(team._participant_topic_types[0], team._team_id))  # the reasoner's container
        sent, send = [], runtime.send_message

        async def counted(*args: Any, **kwargs: Any) -> Any:
            sent.append(args[0])
            return await send(*args, **kwargs)

        runtime.send_message = counted  # type: ignore[method-assign]
        await reset(team, runtime)
        runtime.send_message = send  # type: ignore[method-assign]
        assert runtime._run_context is None  # stopped: the next run starts it
        state = await team.save_state()
        again = await run_once(team, runtime)
        await runtime.stop_when_idle()
        return state, len(sent), first, again

    ours = asyncio.run(main(reset_team))
    agentchats = asyncio.run(main(agentchats_reset))
    assert ours[0] == agentchats[0]  # the same state: buffers, thread, turn and speaker all reset
    assert all(not agent.get("message_buffer") for agent in ours[0]["agent_states"].values())
    assert agentchats[1] == 3 and ours[1] == (3 if traced else 0)  # two participants and the manager
    assert ours[2] == [ReasoningReply("Hmm."), AnswerReply("Sunny.", "stop"), None]
    assert ours[3] == agentchats[3]  # the next run goes as after AgentChat's reset: the reasoner speaks first again
    assert [type(reply) for reply in ours[3]] == [ReasoningReply, AnswerReply, type(None)]


def test_a_duet_task_without_a_bound_run_fails_loudly() -> None:
    async def main() -> None:
        await replayed_team().run(task=task_messages(list(CONVERSATION)))

    with pytest.raises(RuntimeError, match=r"RunNotBoundError.*reasoner was handed a Duet task.*no run is bound"):
        asyncio.run(main())


def test_a_plain_agentchat_task_needs_no_binding() -> None:
    """What AutoGen Studio sends: a text task; the agents yield their events the AgentChat way."""

    async def main() -> list[Any]:
        return [m async for m in replayed_team().run_stream(task="Weather in Paris?")]

    items = asyncio.run(main())
    replies = [read_reply(m) for m in items]
    assert ReasoningReply("Paris is in France.") in replies and AnswerReply("Sunny today.", "stop") in replies
    chunks = [m for m in items if isinstance(m, ModelClientStreamingChunkEvent)]
    assert "".join(c.content for c in chunks if c.source == ANSWERER_NAME) == "Sunny today."
