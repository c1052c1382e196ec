"""The Python API (``duet.agents.Duet``) used directly, without the HTTP service."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from autogen_agentchat.messages import TextMessage
from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage, UserMessage

from duet.agents import AnswerSettings, Duet, Failed, PipelineSettings, ReasonerSettings, ReasoningDelta, export_team
from duet.agents.pipeline._duet import _reset, _restored_positions
from duet.agents.pipeline._stream import DuetStream, EventChannel
from tests.conftest import ANSWER, REASONER, ROOT
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.waiting import until
from duet.workbenches import McpServerSettings, ToolsSettings

USER = [{"role": "user", "content": "hi"}]


def settings(upstream: ScriptedUpstream, **extra: object) -> PipelineSettings:
    return PipelineSettings(reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
                            answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER), **extra)  # type: ignore[arg-type]


def test_cancelling_the_token_ends_the_stream(upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=[f"step {i} " for i in range(40)], delay_between=0.2))

    async def main() -> list[str]:
        token = CancellationToken()
        kinds: list[str] = []
        async with Duet.from_settings(settings(upstream)) as duet:
            async for event in duet.stream(USER, cancellation_token=token):
                kinds.append(event.kind)
                if isinstance(event, ReasoningDelta):
                    token.cancel()
                if isinstance(event, Failed):
                    assert isinstance(event.error, asyncio.CancelledError)
            with pytest.raises(asyncio.CancelledError):
                token = CancellationToken()
                token.cancel()
                await duet.run(USER, cancellation_token=token)
        return kinds

    started = time.monotonic()
    kinds = asyncio.run(asyncio.wait_for(main(), 10))
    assert kinds[0] == "reasoning" and kinds[-1] == "error" and time.monotonic() - started < 3
    assert upstream.requests_for(REASONER)[0].ended.wait(5) and upstream.requests_for(REASONER)[0].aborted


def test_request_out_returns_once_the_first_model_request_is_written(upstream: ScriptedUpstream) -> None:
    """``DuetStream.request_out`` returns when the reasoner's request has gone out, long before its
    answer; for a run that fails before any model call, when it ends; the wait is bounded."""
    upstream.script(REASONER, Reply(reasoning=["late"], delay=1.0))

    async def main() -> None:
        async with Duet.from_settings(settings(upstream)) as duet:
            stream = duet.start(USER)
            started = time.monotonic()
            await stream.request_out(timeout=5)
            assert time.monotonic() - started < 0.5  # the request is out; its answer starts in a second
            await until(lambda: upstream.requests_for(REASONER), "the upstream's thread records the request it was sent", 2)
            assert len(upstream.requests_for(REASONER)) == 1
            assert await stream.next_batch(timeout=0) == []  # no event yet
            assert [event.kind async for event in stream][-1] == "done"
            token = CancellationToken()
            token.cancel()
            failed = duet.start(USER, cancellation_token=token)  # ends before any model call
            await failed.request_out(timeout=5)
            assert [event.kind async for event in failed] == ["error"]
        quiet = EventChannel()  # a run that does nothing yet: the wait ends at its timeout
        started = time.monotonic()
        await quiet.wait_request_out(0.05)
        assert 0.04 < time.monotonic() - started < 0.5
        both = EventChannel()  # two waiters: one gives up early, the other is still told
        short = asyncio.ensure_future(both.wait_request_out(0.01))
        long = asyncio.ensure_future(both.wait_request_out(5))
        await short
        started = time.monotonic()
        both.mark_request_out()
        await long
        assert time.monotonic() - started < 0.5

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_run_needing_no_store_call_writes_its_first_model_request_a_pass_sooner(upstream: ScriptedUpstream) -> None:
    """The first speaker's turn is made in the caller's step when the run needs no store call first
    (issue 28: on a busy worker every pass of the event loop is long): its request is written in the
    loop's first pass after ``start`` (the turn's first step), not a pass later behind the run's own task."""
    upstream.script(REASONER, Reply(reasoning=["first"]), Reply(reasoning=["second"]))

    async def passes_to_request_out(stream: DuetStream) -> int:
        passes = 0
        while not stream._channel._request_out and passes < 50:
            await asyncio.sleep(0)
            passes += 1
        assert [event.kind async for event in stream][-1] == "done"
        return passes

    async def main() -> int:
        async with Duet.from_settings(settings(upstream)) as duet:
            await duet.run(USER)  # the upstream's connection is open and pooled (a new one takes passes of its own)
            return await passes_to_request_out(duet.start(USER))

    assert asyncio.run(asyncio.wait_for(main(), 10)) == 1


def test_new_team_runs_with_agentchat(upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["plan"]))
    upstream.script(ANSWER, Reply(content=["answer"]))

    async def main() -> list[str]:
        duet = Duet.from_settings(settings(upstream))
        team = duet.new_team()
        try:
            result = await asyncio.wait_for(team.run(task="hi"), 10)
        finally:
            for agent in team._participants:  # type: ignore[attr-defined]  # a standalone team's agents are the caller's to close
                await agent.close()
            await duet.close()
        return [m.content for m in result.messages if isinstance(m, TextMessage)]

    assert asyncio.run(main()) == ["hi", "plan", "answer"]


def test_the_reasoners_call_is_made_once_and_only_for_a_team_certain_to_reach_it(upstream: ScriptedUpstream) -> None:
    """The first speaker starts its turn while the team routes the task to it: one call per request
    all the same. A team file whose termination may end the team before anyone speaks (here, at
    once) starts nothing ahead: no model call is paid for that the team does not make."""
    from autogen_agentchat.conditions import MaxMessageTermination

    document = export_team(settings(upstream))
    ending_at_once = {**document, "config": {**document["config"],
                                             "termination_condition": MaxMessageTermination(1).dump_component().model_dump()}}

    async def main() -> tuple[list[str], list[str]]:
        async with Duet.from_team(document) as duet, Duet.from_team(ending_at_once) as ends_at_once:
            upstream.script(REASONER, Reply(reasoning=["plan"]))
            upstream.script(ANSWER, Reply(content=["answer"]))
            served = [event.kind async for event in duet.stream(USER)]
            ended = [event.kind async for event in ends_at_once.stream(USER)]
        return served, ended

    served, ended = asyncio.run(asyncio.wait_for(main(), 10))
    assert served == ["reasoning", "usage", "content", "usage", "done"]
    assert ended == ["done"]
    assert [r.model for r in upstream.requests] == [REASONER, ANSWER]


def test_team_file_pipelines_close_the_clients_they_load() -> None:
    """The model clients a team-file pipeline loads (shared by its pooled teams) are closed with the
    pipeline, and with them their upstream connections; failed teams close whatever they own."""
    with ScriptedUpstream() as upstream:  # its own: other servers keep pooled connections to the shared one
        _close_the_clients(upstream)


def _close_the_clients(upstream: ScriptedUpstream) -> None:
    document = export_team(settings(upstream))

    async def main() -> None:
        duet = Duet.from_team(document)
        for _ in range(3):
            upstream.script(ANSWER, *[Reply(status=500)] * 3)  # the first try and two retries
            assert isinstance([e async for e in duet.stream(USER)][-1], Failed)
        for _ in range(2):
            assert [e async for e in duet.stream(USER)][-1].kind == "done"
        # A grace for the last team to settle back into the pool (in the background, nothing to wait on
        # from outside): close then finds it there; what the test asserts is polled below, with a deadline.
        await asyncio.sleep(0.2)
        await duet.close()

    asyncio.run(main())
    deadline = time.monotonic() + 5
    while upstream.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.open_connections == 0


def test_close_stops_the_mcp_servers(upstream: ScriptedUpstream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    mcp = McpServerSettings(name="calc", command=sys.executable, args=["-m", "tests.mcp_server"], cwd=str(ROOT),
                            env={"PYTHONPATH": str(ROOT)})

    async def main() -> tuple[dict, dict]:  # type: ignore[type-arg]
        duet = Duet.from_settings(settings(upstream, tools=ToolsSettings(mcp=[mcp])))
        async with duet:
            running = duet.services.status()
            assert {"add", "shout"} <= duet.service_tool_names
        return running, duet.services.status()

    running, after = asyncio.run(main())
    assert running["calc"]["status"] == "running" and after["calc"]["status"] == "stopped"


def test_restored_positions_follow_the_spliced_rounds() -> None:
    """A user message keeps its index; tool results are found by a call id of theirs where the hidden
    part of a round (service calls) was put back before them."""
    def results(*call_ids: str) -> FunctionExecutionResultMessage:
        return FunctionExecutionResultMessage(content=[FunctionExecutionResult(content="ok", call_id=i, name="f") for i in call_ids])

    def calls(*call_ids: str) -> AssistantMessage:
        return AssistantMessage(content=[FunctionCall(id=i, name="f", arguments="{}") for i in call_ids], source="a")

    sent = [UserMessage(content="Q", source="user"), calls("c1"), results("c1"), calls("c2"), results("c2")]
    restored = [sent[0], calls("s0"), results("s0"), calls("s1", "c1"), results("s1", "c1"), calls("c2"), results("c2")]
    assert _restored_positions(sent, restored, {0: "", 2: "", 4: ""}) == {0: 0, 2: 4, 4: 6}


def test_a_team_that_cannot_reset_in_time_is_not_reused_and_what_still_runs_of_it_is_cancelled(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A handler of a clean run that never ends would hold the team's reset (it waits for the runtime to be
    idle), so the run's task and its team, for ever: the reset is bounded, the team closed, the handler cancelled."""
    from duet.agents.pipeline import _duet
    from duet.agents.pipeline._pool import TeamSlot
    from duet.agents.runtime import LeanAgentRuntime

    monkeypatch.setattr(_duet, "SETTLE_TIMEOUT", 0.2)

    async def run() -> tuple[bool, bool]:
        runtime = LeanAgentRuntime()
        runtime.start()
        stuck = asyncio.ensure_future(asyncio.Event().wait())
        runtime._background_tasks.add(stuck)

        async def never_idle(team: object, team_runtime: object) -> None:
            await asyncio.Event().wait()

        monkeypatch.setattr(_duet, "reset_team", never_idle)
        reset = await asyncio.wait_for(_reset(TeamSlot(team=None, runtime=runtime)), 5)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        return reset, stuck.cancelled()

    assert asyncio.run(run()) == (False, True)
    assert "closing a team that failed to reset" in caplog.text
