"""Agents on the lean runtime (``agents/runtime/_agents.py``): a shared handler table, message order kept,
no waiting line until one is needed, one coroutine per message, agent types registered without a closure
each."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer  # not exported (0.7.5)
from autogen_agentchat.teams._group_chat._events import (  # not exported (0.7.5)
    GroupChatAgentResponse,
    GroupChatMessage,
    GroupChatStart,
    GroupChatTeamResponse,
)
from autogen_agentchat.teams._group_chat._round_robin_group_chat import RoundRobinGroupChatManager  # not exported (0.7.5)
from autogen_agentchat.teams._group_chat._sequential_routed_agent import (
    SequentialRoutedAgent,
)
from autogen_core import (
    AgentId,
    MessageContext,
    SingleThreadedAgentRuntime,
    event,
    rpc,
)
from duet.agents.runtime import LeanAgentRuntime, noted_at_once

from tests.core_parts import run_a_team_on
from tests.waiting import until


@dataclass
class Step:
    number: int


class InOrder(SequentialRoutedAgent):
    """Handles ``Step`` one at a time, in arrival order (AgentChat's FIFO lock), the first slowest."""

    def __init__(self, log: list[str]) -> None:
        super().__init__("handles steps in order", sequential_message_types=[Step])
        self.log = log

    @rpc
    async def on_step(self, message: Step, ctx: MessageContext) -> int:
        self.log.append(f"start {message.number}")
        await asyncio.sleep(0.02 * (3 - message.number))  # a later step would overtake an earlier one
        self.log.append(f"end {message.number}")
        return message.number


async def _three_steps_at_once() -> tuple[list[str], list[Any]]:
    """Two lean runtimes, each with an ``InOrder`` agent sent three steps at once; the first agent's
    log, and both agents."""
    logs: list[list[str]] = [[], []]
    agents = []
    for log in logs:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        await InOrder.register(runtime, "in_order", lambda log=log: InOrder(log))
        runtime.start()
        replies = await asyncio.wait_for(asyncio.gather(
            *(runtime.send_message(Step(n), AgentId("in_order", "default")) for n in range(3))), 5)
        assert replies == [0, 1, 2]
        agents.append(await runtime.try_get_underlying_agent_instance(AgentId("in_order", "default"), InOrder))
        await runtime.stop_when_idle()
    return logs[0], agents


def test_agents_of_a_lean_runtime_share_their_handler_table_and_keep_message_order() -> None:
    """The handler table built from the class is one object for every instance, and the sequential
    lock (with no queue until a message waits) still hands over in arrival order."""
    log, (first, second) = asyncio.run(_three_steps_at_once())
    assert log == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]
    assert first._handlers is second._handlers and set(first._handlers) == {Step}
    assert first._sequential_message_types is second._sequential_message_types == (Step,)
    assert not first._fifo_lock._locked and not first._fifo_lock._waiting


def test_a_fresh_agent_of_a_lean_runtime_holds_no_waiting_line() -> None:
    async def make() -> Any:
        runtime = LeanAgentRuntime()
        await InOrder.register(runtime, "in_order", lambda: InOrder([]))
        return await runtime.try_get_underlying_agent_instance(AgentId("in_order", "default"), InOrder)

    agent = asyncio.run(make())
    assert agent._fifo_lock._waiting is None and not hasattr(agent._fifo_lock, "_queue") and not hasattr(agent._fifo_lock, "__dict__")


def test_a_lean_runtime_registers_agent_types_without_a_closure_each_and_makes_agents_as_the_stock_one() -> None:
    """No wrapper closure per agent type (nor the annotations dict reading its signature leaves on it);
    the agents are made in their instantiation context and a factory of the wrong class is refused,
    as the stock runtime does; an instance cannot be registered to a factory's type."""
    from autogen_core import RoutedAgent
    from duet.agents.runtime._agents import AgentFactory

    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert asyncio.run(run_a_team_on(runtime)) == ["user", "first", "second"]
    assert len(runtime._agent_factories) == 3 and all(type(factory) is AgentFactory for factory in runtime._agent_factories.values())

    async def refusals(runtime: SingleThreadedAgentRuntime) -> list[str]:
        await InOrder.register(runtime, "wrong", lambda: RoutedAgent("not in order"))  # type: ignore[arg-type, return-value]
        await InOrder.register(runtime, "right", lambda: InOrder([]))
        errors = []
        with pytest.raises(ValueError) as wrong:
            await runtime.try_get_underlying_agent_instance(AgentId("wrong", "default"))
        errors.append(str(wrong.value))
        with pytest.raises(ValueError) as instance:
            await runtime.register_agent_instance(InOrder([]), AgentId("right", "other"))
        errors.append(str(instance.value))
        made = await runtime.try_get_underlying_agent_instance(AgentId("right", "default"), InOrder)
        errors.append(f"{made.id} {made.runtime is runtime}")
        return errors

    stock = asyncio.run(refusals(SingleThreadedAgentRuntime()))
    assert asyncio.run(refusals(LeanAgentRuntime())) == stock
    assert stock[0].startswith("Factory registered using the wrong type") and stock[2] == "right/default True"


def test_a_routed_agent_on_a_lean_runtime_is_handed_its_message_in_one_coroutine_not_three(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler (a team's turn runs in one) waits below one coroutine of the runtime's dispatch, not
    below BaseAgent.on_message and two on_message_impl (each kept as long as the turn); sequential
    agents still take their messages in order (test above), and other agents are called as they are."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def chain() -> list[str]:
        gate = asyncio.Event()

        class Waits(InOrder):
            @rpc
            async def on_step(self, message: Step, ctx: MessageContext) -> int:
                await gate.wait()
                return message.number

        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        await Waits.register(runtime, "waits", lambda: Waits([]))
        runtime.start()
        reply = asyncio.ensure_future(runtime.send_message(Step(7), AgentId("waits", "default")))
        await until(lambda: gate._waiters, "the message's handler waits at its gate")  # its whole chain of awaits is built
        [handler] = runtime._background_tasks
        names, coro = [], handler.get_coro()
        while coro is not None and hasattr(coro, "cr_code"):
            names.append(coro.cr_code.co_name)
            coro = coro.cr_await
        gate.set()
        assert await asyncio.wait_for(reply, 5) == 7
        await runtime.stop_when_idle()
        return names

    names = asyncio.run(chain())
    assert names[0] == "_process_send" and "on_step" in names
    assert "on_message" not in names and "on_message_impl" not in names


def test_the_messages_an_agent_class_only_notes_down_are_agentchats_note_taking_handlers_not_overridden() -> None:
    """AgentChat's container buffers the task and the others' replies, its manager queues an agent's message
    for the team's output; a class that handles one of them its own way does not note it down at once."""
    class OwnReplies(ChatAgentContainer):
        @event
        async def handle_agent_response(self, message: GroupChatAgentResponse, ctx: MessageContext) -> None:
            await asyncio.sleep(0)

    assert noted_at_once(ChatAgentContainer) == {GroupChatStart, GroupChatAgentResponse, GroupChatTeamResponse}
    assert noted_at_once(OwnReplies) == {GroupChatStart, GroupChatTeamResponse}
    assert noted_at_once(RoundRobinGroupChatManager) == {GroupChatMessage}
