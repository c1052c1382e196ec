"""The lean runtime (``agents/runtime/_runtime.py``): each shortcut does less work than the stock runtime
and delivers the same (log lines formatted only when read, unique ids, fewer tasks when unobserved, the
stock path when observed, one serializer registry, handler room given back)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

import pytest
from autogen_core import (
    AgentId,
    ClosureAgent,
    ClosureContext,
    DefaultTopicId,
    MessageContext,
    SingleThreadedAgentRuntime,
    TopicId,
    TypeSubscription,
)
from duet.agents.runtime import LeanAgentRuntime


class Counted:
    """A message whose ``repr`` is counted: the stock runtime formats it for its INFO line."""

    reprs = 0

    def __init__(self, text: str) -> None:
        self.text = text
        self.part = _CountedPart()


class _CountedPart:
    def __repr__(self) -> str:
        Counted.reprs += 1
        return "part"


async def _deliver_one_of_each() -> list[str]:
    """Publishes one message and sends one to a closure agent on a lean runtime; what it received."""
    received: list[str] = []

    async def collect(_: ClosureContext, message: Counted, ctx: MessageContext) -> str:
        received.append(f"{'rpc' if ctx.is_rpc else 'published'} {message.text}")
        return "ok"

    runtime = LeanAgentRuntime()
    await ClosureAgent.register_closure(runtime, "collector", collect, subscriptions=lambda: [TypeSubscription("default", "collector")])
    runtime.start()
    await runtime.publish_message(Counted("one"), DefaultTopicId())
    reply = await asyncio.wait_for(runtime.send_message(Counted("two"), AgentId("collector", "default")), 5)
    await runtime.stop_when_idle()
    assert reply == "ok"
    return sorted(received)


@pytest.mark.parametrize("level", [logging.WARNING, logging.INFO])
def test_lean_runtime_formats_its_info_lines_only_when_info_is_enabled(level: int, caplog: pytest.LogCaptureFixture) -> None:
    Counted.reprs = 0
    with caplog.at_level(level, logger="autogen_core"):
        received = asyncio.run(_deliver_one_of_each())
    assert received == ["published one", "rpc two"]  # delivered either way
    lines = [r.getMessage() for r in caplog.records if r.name == "autogen_core"]
    if level == logging.INFO:  # the stock lines, formatted as AutoGen formats them
        assert any(line.startswith("Publishing message of type Counted") and "part" in line for line in lines)
        assert any(line.startswith("Sending message of type Counted to collector") and "part" in line for line in lines)
        assert Counted.reprs >= 2
    else:
        assert Counted.reprs == 0
        assert not any("message of type Counted" in line for line in lines)


def test_lean_runtime_message_ids_are_unique_uuids() -> None:
    async def ids_of_one_runtime() -> list[str]:
        ids: list[str] = []

        async def collect(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
            ids.append(ctx.message_id)

        runtime = LeanAgentRuntime()
        await ClosureAgent.register_closure(runtime, "collector", collect, subscriptions=lambda: [TypeSubscription("default", "collector")])
        runtime.start()
        for text in ("a", "b", "c"):
            await runtime.publish_message(Counted(text), DefaultTopicId())
            await asyncio.wait_for(runtime.send_message(Counted(text), AgentId("collector", "default")), 5)
        await runtime.stop_when_idle()
        return ids

    first, second = asyncio.run(ids_of_one_runtime()), asyncio.run(ids_of_one_runtime())
    assert len(first) == 6 and len(set(first + second)) == 12  # unique, also across runtimes
    assert all(uuid.UUID(message_id).version == 4 for message_id in first + second)


async def _a_round_of_messages(runtime: SingleThreadedAgentRuntime) -> tuple[list[str], int]:
    """Sends (a reply, a failure) and publishes (to one and to two subscribers) on ``runtime``; what was
    received and replied, in order, and how many tasks the round created."""
    received: list[str] = []

    async def answer(_: ClosureContext, message: Counted, ctx: MessageContext) -> str:
        if message.text == "fail":
            raise ValueError("handler failed")
        received.append(f"{ctx.topic_id.type if ctx.topic_id else 'rpc'} {message.text}")
        return f"re: {message.text}"

    await ClosureAgent.register_closure(runtime, "first", answer, subscriptions=lambda: [
        TypeSubscription("alone", "first"), TypeSubscription("both", "first")])
    await ClosureAgent.register_closure(runtime, "second", answer, subscriptions=lambda: [TypeSubscription("both", "second")])
    loop = asyncio.get_running_loop()
    created = 0

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting_factory)
    runtime.start()
    try:
        received.append(await asyncio.wait_for(runtime.send_message(Counted("hi"), AgentId("first", "default")), 5))
        with pytest.raises(ValueError, match="handler failed"):
            await asyncio.wait_for(runtime.send_message(Counted("fail"), AgentId("first", "default")), 5)
        await runtime.publish_message(Counted("to one"), TopicId("alone", "default"))
        await runtime.publish_message(Counted("to two"), TopicId("both", "default"))
        await asyncio.wait_for(runtime.stop_when_idle(), 5)
    finally:
        loop.set_task_factory(None)
    return received, created


def test_an_unobserved_lean_runtime_delivers_the_same_with_fewer_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """No logging, event log, spans or intervention: a reply resolves its sender's future without a
    trip through the queue (a task fewer per send), one subscriber's handler runs in the publishing
    task (a task fewer per publish) and no message loop waits on the empty queue (a task fewer per
    run); what is delivered, replied and raised is the stock runtime's."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
    stock_received, stock_tasks = asyncio.run(_a_round_of_messages(SingleThreadedAgentRuntime(ignore_unhandled_exceptions=False)))
    lean = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert lean._unobserved()
    lean_received, lean_tasks = asyncio.run(_a_round_of_messages(lean))
    assert sorted(lean_received) == sorted(stock_received) == sorted(
        ["rpc hi", "re: hi", "alone to one", "both to two", "both to two"])
    # a task fewer for the reply to the send that succeeded, for the publish with one subscriber, and the loop's
    assert stock_tasks - lean_tasks == 3


@pytest.mark.parametrize("observed_by", ["spans", "info"])
def test_an_observed_lean_runtime_takes_the_stock_path(observed_by: str, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    if observed_by == "spans":
        monkeypatch.delenv("AUTOGEN_DISABLE_RUNTIME_TRACING", raising=False)
    else:
        monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
        caplog.set_level(logging.INFO, logger="autogen_core")
    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert not runtime._unobserved()
    received, tasks = asyncio.run(_a_round_of_messages(runtime))
    stock_received, stock_tasks = asyncio.run(_a_round_of_messages(SingleThreadedAgentRuntime(ignore_unhandled_exceptions=False)))
    assert sorted(received) == sorted(stock_received) and tasks == stock_tasks


def test_lean_runtimes_share_one_serializer_registry_that_still_serves_the_event_log(caplog: pytest.LogCaptureFixture) -> None:
    """A team adds a serializer for each message type to its runtime when it first runs: one registry
    for every lean runtime keeps the first, and the event log (when enabled) still gets the JSON."""
    from autogen_core import EVENT_LOGGER_NAME
    from autogen_core._serialization import try_get_known_serializers_for_type
    from pydantic import BaseModel

    class Note(BaseModel):
        text: str

    first, second = LeanAgentRuntime(), LeanAgentRuntime()
    first.add_message_serializer(try_get_known_serializers_for_type(Note))
    kept = dict(second._serialization_registry._serializers)
    second.add_message_serializer(try_get_known_serializers_for_type(Note))
    assert second._serialization_registry._serializers == kept  # the same serializer objects, not new ones
    caplog.set_level(logging.INFO, logger=EVENT_LOGGER_NAME)
    assert json.loads(second._try_serialize(Note(text="hi"))) == {"text": "hi"}


def test_a_lean_runtime_gives_back_the_room_of_its_handlers_once_none_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its set of running handlers grows past four at a burst of messages; once none runs it is as
    small as a new set again (a set keeps the table it grew to until it is cleared)."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def burst() -> tuple[int, int, int]:
        gate = asyncio.Event()
        handled: list[str] = []

        async def wait(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
            await gate.wait()
            handled.append(message.text)

        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        await ClosureAgent.register_closure(runtime, "waiter", wait, subscriptions=lambda: [TypeSubscription("burst", "waiter")])
        runtime.start()
        for number in range(8):
            await runtime.publish_message(Counted(str(number)), TopicId("burst", "default"))
        await asyncio.sleep(0)
        running = len(runtime._background_tasks)
        grown = runtime._background_tasks.__sizeof__()
        gate.set()
        await asyncio.wait_for(runtime.stop_when_idle(), 5)
        assert len(handled) == 8
        return running, grown, runtime._background_tasks.__sizeof__()

    running, grown, after = asyncio.run(burst())
    assert running == 8 and grown > set().__sizeof__() and after == set().__sizeof__()
