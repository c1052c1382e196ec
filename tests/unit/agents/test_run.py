"""The run binding (``agents/_run.py``): a turn started ahead of the team, ``bind_run`` and the tasks that
inherit it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from autogen_agentchat.base import Response
from autogen_agentchat.messages import (
    TextMessage,
)
from autogen_core import CancellationToken
from duet.agents import ReasoningDelta
from duet.agents._base import DuetAgent
from duet.agents._run import bind_run, current_run

from tests.core_parts import collecting_run


class _EarlyTurn:
    def __init__(self) -> None:
        self.closed = False

    async def under_way(self) -> None:
        return None

    async def close(self) -> None:
        self.closed = True


def test_a_turn_started_ahead_goes_to_its_agent_for_exactly_its_messages() -> None:
    task = [TextMessage(source="client", content="hi"), TextMessage(source="client", content="more")]
    run, call = collecting_run([]), _EarlyTurn()
    run.head_start("reasoner", task, call)
    assert run.take_head_start("answerer", task) is None  # another agent's turn
    assert run.take_head_start("reasoner", task[:1]) is None  # other messages
    assert run.take_head_start("reasoner", [m.model_copy() for m in task]) is None  # equal, but not the messages it was started on
    assert run.take_head_start("reasoner", list(task)) is call
    assert run.take_head_start("reasoner", task) is None  # taken once: the agent owns it now
    asyncio.run(run.drop_head_start())
    assert not call.closed  # a taken turn is its agent's


class _GatedAgent(DuetAgent):
    """Its turn waits for ``gate`` before each of ``events``, and before its reply."""

    def __init__(self, gate: asyncio.Event, events: list[Any]) -> None:
        super().__init__("gated", "waits for its gate", None)
        self._gate, self._events = gate, events

    async def _turn(self, messages: Any, run: Any, cancellation_token: CancellationToken) -> Any:
        for event in self._events:
            await self._gate.wait()
            self._gate.clear()
            yield event
        await self._gate.wait()
        yield Response(chat_message=TextMessage(source=self.name, content="done"))


@pytest.mark.parametrize("events", [[ReasoningDelta(text="first", source="gated"), ReasoningDelta(text="second", source="gated")], []], ids=["events", "none"])
def test_the_team_routes_a_turn_started_ahead_once_its_first_event_is_on_its_way(events: list[Any]) -> None:
    """The team's routing is not on the path of the first token: the run waits for the turn's
    first event (or its end, when it hands on none) before the team takes its first step."""
    async def scenario() -> None:
        gate, sink = asyncio.Event(), []
        run = collecting_run(sink)
        await _GatedAgent(gate, events).head_start([TextMessage(source="client", content="hi")], run, CancellationToken())
        waiting = asyncio.ensure_future(run.head_start_under_way())
        await asyncio.sleep(0.05)  # a window for what must not happen: nothing can be awaited for an absence
        assert not waiting.done() and sink == []  # nothing handed on yet: the team would still wait
        gate.set()
        await asyncio.wait_for(waiting, 5)  # at the first event, while the turn still waits for the next
        assert sink == events[:1]
        await run.drop_head_start()

    asyncio.run(scenario())


def test_a_turn_started_ahead_that_no_team_took_is_stopped_with_the_run() -> None:
    run, call = collecting_run([]), _EarlyTurn()
    run.head_start("reasoner", [TextMessage(source="client", content="hi")], call)
    asyncio.run(run.drop_head_start())
    assert call.closed
    asyncio.run(run.drop_head_start())  # nothing left: a no-op


def test_bind_run_sets_and_resets() -> None:
    outer, inner = collecting_run([]), collecting_run([])
    assert current_run() is None
    with bind_run(outer):
        assert current_run() is outer
        with bind_run(inner):
            assert current_run() is inner
        assert current_run() is outer
        with pytest.raises(RuntimeError), bind_run(inner):
            raise RuntimeError("the run failed")
        assert current_run() is outer  # unbound however the block ends
    assert current_run() is None


def test_tasks_created_inside_the_binding_inherit_it() -> None:
    async def main() -> tuple[object, object, object]:
        run = collecting_run([])
        with bind_run(run):
            inside = asyncio.create_task(asyncio.sleep(0, result=None))
            seen_inside = asyncio.create_task(_current())
        seen_after = asyncio.create_task(_current())
        await inside
        return run, await seen_inside, await seen_after

    async def _current() -> object:
        return current_run()

    run, seen_inside, seen_after = asyncio.run(main())
    assert seen_inside is run and seen_after is None
