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
    event,
)
from autogen_agentchat.teams._group_chat._sequential_routed_agent import SequentialRoutedAgent  # not exported (0.7.5)
from autogen_core._message_handler_context import MessageHandlerContext
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
    # a task fewer for the reply to the send that succeeded, for the publish with one subscriber, for the one
    # with two (a task for each, none to gather them), and the loop's
    assert stock_tasks - lean_tasks == 4


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


def test_a_list_of_serializers_added_again_is_not_walked_again() -> None:
    """Duet's agent classes hand a runtime the same serializer lists at every new team's first run (they
    find their handlers once): a list the shared registry took whole is not walked again."""
    from autogen_core._serialization import try_get_known_serializers_for_type
    from pydantic import BaseModel

    class Reading(BaseModel):
        value: int

    class Walked(list):  # type: ignore[type-arg]
        walks = 0

        def __iter__(self) -> Any:
            Walked.walks += 1
            return super().__iter__()

    serializers = Walked(try_get_known_serializers_for_type(Reading))
    for runtime in (LeanAgentRuntime(), LeanAgentRuntime()):
        runtime.add_message_serializer(serializers)
    assert Walked.walks == 1
    assert LeanAgentRuntime()._serialization_registry.is_registered(serializers[0].type_name, serializers[0].data_content_type)
    fresh = Walked(try_get_known_serializers_for_type(Reading))  # another list of the same: walked, its serializers known
    LeanAgentRuntime().add_message_serializer(fresh)
    assert Walked.walks == 2
    for _ in range(300):  # new lists each time (a stock team's first runs): what is remembered stays bounded
        LeanAgentRuntime().add_message_serializer(list(try_get_known_serializers_for_type(Reading)))
    assert len(LeanAgentRuntime()._serialization_registry._lists_added) <= 256


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


async def _publishes_on_a_made_team(runtime: LeanAgentRuntime, fail: str = "") -> tuple[list[str], list[int]]:
    """Three agents made by a first message each, then: a publish only its sender subscribes to, and
    one to three recipients; what each received in the order their handlers started, and the tasks
    each of the two publishes created. ``fail``: the agent whose handler raises."""
    started: list[str] = []

    def agent(name: str) -> Any:
        async def handle(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
            started.append(f"{name} {message.text}")
            if name == fail and message.text == "all":
                raise ValueError(f"{name} failed")
        return handle

    for name in ("a", "b", "c"):
        await ClosureAgent.register_closure(runtime, name, agent(name), subscriptions=lambda name=name: [
            TypeSubscription("all", name), TypeSubscription(f"own-{name}", name)])
    loop = asyncio.get_running_loop()
    created: list[int] = []

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created[-1] += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    runtime.start()
    for name in ("a", "b", "c"):  # each agent made
        await runtime.publish_message(Counted("made"), TopicId(f"own-{name}", "default"))
    await asyncio.sleep(0.01)
    started.clear()
    loop.set_task_factory(counting_factory)
    try:
        for topic, sender in (("own-a", AgentId("a", "default")), ("all", None)):
            created.append(0)
            await runtime.publish_message(Counted(topic), TopicId(topic, "default"), sender=sender)
    finally:
        loop.set_task_factory(None)
    return started, created


def test_an_unobserved_lean_runtime_starts_a_task_per_recipient_and_none_for_a_publish_nobody_else_gets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a run's agents are made: a message published to a topic only its sender subscribes to
    starts no task (it goes nowhere, as on the stock runtime); one with three recipients starts one
    handler task for each, in the order of their subscriptions (the stock runtime: a task that
    gathers a task for each); ``stop_when_idle`` waits for all of them."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> tuple[list[str], list[int]]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        started, created = await _publishes_on_a_made_team(runtime)
        await asyncio.wait_for(runtime.stop_when_idle(), 5)
        return started, created

    started, created = asyncio.run(run())
    assert started == ["a all", "b all", "c all"]
    assert created == [0, 3]


def test_a_failing_recipient_of_a_publish_still_fails_the_run(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A handler task of one recipient that raises: the others run, the failure is logged as the stock
    runtime logs it and raised by ``stop_when_idle``."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> list[str]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        started, _ = await _publishes_on_a_made_team(runtime, fail="b")
        with pytest.raises(ValueError, match="b failed"):
            await asyncio.wait_for(runtime.stop_when_idle(), 5)
        return started

    assert asyncio.run(run()) == ["a all", "b all", "c all"]
    assert any(record.getMessage().startswith("Error processing publish message for b/default") for record in caplog.records)


def test_a_lean_runtime_reads_whether_it_is_observed_when_a_run_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read once a run: INFO enabled for AutoGen's logger while a run goes on applies from the next run;
    a stopped runtime reads it at each question."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
    autogen_logger = logging.getLogger("autogen_core")
    level = autogen_logger.level

    async def run() -> list[bool]:
        runtime = LeanAgentRuntime()
        seen = [runtime._unobserved()]
        runtime.start()
        autogen_logger.setLevel(logging.INFO)
        seen.append(runtime._unobserved())
        await runtime.stop_when_idle()
        seen.append(runtime._unobserved())
        runtime.start()
        seen.append(runtime._unobserved())
        await runtime.stop()
        return seen

    try:
        autogen_logger.setLevel(logging.WARNING)
        assert asyncio.run(run()) == [True, True, False, False]
    finally:
        autogen_logger.setLevel(level)


def test_a_publish_to_agents_not_made_yet_is_handled_before_the_next_one_and_a_failed_factory_fails_the_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first message of a run to agents not made yet: they are made in the publishing task, so a
    message published next to one of them is handled after it (a group chat manager's start, then its
    request to speak); an agent whose factory raises fails the run as on the stock runtime."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> list[str]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        handled: list[str] = []

        async def handle(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
            handled.append(f"{ctx.topic_id.type if ctx.topic_id else ''} {message.text}")

        for name in ("a", "b"):
            await ClosureAgent.register_closure(runtime, name, handle, subscriptions=lambda name=name: [
                TypeSubscription("all", name), TypeSubscription(f"own-{name}", name)])

        def broken() -> Any:
            raise RuntimeError("cannot make it")

        await runtime.register_factory("broken", broken)
        await runtime.add_subscription(TypeSubscription("to-broken", "broken"))
        runtime.start()
        await runtime.publish_message(Counted("start"), TopicId("all", "default"))
        await runtime.publish_message(Counted("speak"), TopicId("own-a", "default"))
        await asyncio.wait_for(runtime.stop_when_idle(), 5)
        runtime.start()
        await runtime.publish_message(Counted("lost"), TopicId("to-broken", "default"))
        with pytest.raises(RuntimeError, match="cannot make it"):
            await asyncio.wait_for(runtime.stop_when_idle(), 5)
        return handled

    assert asyncio.run(run()) == ["all start", "all start", "own-a speak"]


def test_a_run_that_queued_nothing_leaves_its_queue_to_the_next_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stock runtime makes a new message queue each time it stops; a lean runtime whose messages
    all went to their handlers at once keeps its queue (as new: empty, nothing unfinished, not shut
    down) for the next run, and a message published while it is stopped waits for the next run, as on
    the stock runtime's new queue. A run whose message loop ran (observed) ends with a new queue."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> tuple[list[str], list[bool]]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        received: list[str] = []

        async def collect(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
            received.append(message.text)

        await ClosureAgent.register_closure(runtime, "collector", collect, subscriptions=lambda: [TypeSubscription("notes", "collector")])
        kept: list[bool] = []
        for text in ("first", "second"):
            queue = runtime._message_queue
            runtime.start()
            await runtime.publish_message(Counted(text), TopicId("notes", "default"))
            await asyncio.wait_for(runtime.stop_when_idle(), 5)
            kept.append(runtime._message_queue is queue)
        await runtime.publish_message(Counted("while stopped"), TopicId("notes", "default"))
        assert received == ["first", "second"]
        queue = runtime._message_queue
        runtime.start()  # the queued message starts the loop: this run ends with a new queue
        await asyncio.wait_for(runtime.stop_when_idle(), 5)
        kept.append(runtime._message_queue is queue)
        return received, kept

    assert asyncio.run(run()) == (["first", "second", "while stopped"], [True, True, False])


def test_a_publish_on_a_runtime_with_many_agents_finds_its_recipient_by_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime many teams share holds more agents than a team's few: a made recipient is found by its
    id (the dict), and only it gets the message."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> list[str]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        handled: list[str] = []

        async def handle(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
            handled.append(f"{_.id.type}/{_.id.key} {message.text}")

        await ClosureAgent.register_closure(runtime, "many", handle, subscriptions=lambda: [TypeSubscription("notes", "many")])
        runtime.start()
        for key in range(12):
            await runtime.publish_message(Counted("made"), TopicId("notes", str(key)))
        await asyncio.wait_for(runtime.stop_when_idle(), 5)
        assert len(runtime._instantiated_agents) == 12
        handled.clear()
        runtime.start()
        await runtime.publish_message(Counted("to seven"), TopicId("notes", "7"))
        await asyncio.wait_for(runtime.stop_when_idle(), 5)
        return handled

    assert asyncio.run(run()) == ["many/7 to seven"]


class _Noter(SequentialRoutedAgent):
    """Notes each ``Counted`` down; its class says so (``_noted_at_once``), as Duet's team agents' do.
    ``waits``: the handler waits for the event loop once before it notes."""

    _noted_at_once = frozenset({Counted})

    def __init__(self, waits: bool, noted: list[str]) -> None:
        super().__init__("notes messages down", sequential_message_types=[Counted])
        self.noted = noted
        self.handling: list[AgentId | None] = []
        self._waits = waits

    @event
    async def note(self, message: Counted, ctx: MessageContext) -> None:
        if self._waits:
            await asyncio.sleep(0)
        self.handling.append(MessageHandlerContext.agent_id())
        self.noted.append(message.text)


async def _a_noter(runtime: LeanAgentRuntime, *, waits: bool = False) -> tuple[_Noter, list[int]]:
    """A started runtime with a made ``_Noter`` subscribed to "notes" and a closure agent to "other";
    the count of tasks created from here on (one entry, counted by a task factory set on the loop). Both
    write what they handled into the noter's ``noted``."""
    noted: list[str] = []
    await runtime.register_factory("noter", lambda: _Noter(waits, noted))
    await runtime.add_subscription(TypeSubscription("notes", "noter"))

    async def other(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
        noted.append(f"other {message.text}")

    await ClosureAgent.register_closure(runtime, "other", other, subscriptions=lambda: [TypeSubscription("other", "other")])
    runtime.start()
    noter = await runtime._get_agent(AgentId("noter", "default"))
    created = [0]

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created[0] += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    asyncio.get_running_loop().set_task_factory(counting_factory)
    assert isinstance(noter, _Noter)
    return noter, created


def test_a_message_its_recipient_only_notes_down_is_handled_in_the_publishers_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """No handler under way and the recipient's class notes the message down: handled before the publish
    returns, without a task, in the recipient's handler context (not left set in the publisher's)."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> None:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        noter, created = await _a_noter(runtime)
        try:
            await runtime.publish_message(Counted("one"), TopicId("notes", "default"))
            assert noter.noted == ["one"] and created == [0]
            assert noter.handling == [AgentId("noter", "default")]
            with pytest.raises(RuntimeError):
                MessageHandlerContext.agent_id()  # the publisher's context: no handler's
            await asyncio.wait_for(runtime.stop_when_idle(), 5)
        finally:
            asyncio.get_running_loop().set_task_factory(None)

    asyncio.run(run())


def test_a_noted_message_whose_handler_waits_goes_on_in_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler that waits after all: its first step in the publisher's, the rest in a task from where it
    waited (in the handler's context), counted until done: ``stop_when_idle`` waits for it."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> None:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        noter, created = await _a_noter(runtime, waits=True)
        try:
            await runtime.publish_message(Counted("one"), TopicId("notes", "default"))
            assert noter.noted == [] and created == [1]
            await asyncio.wait_for(runtime.stop_when_idle(), 5)
            assert noter.noted == ["one"] and noter.handling == [AgentId("noter", "default")]
        finally:
            asyncio.get_running_loop().set_task_factory(None)

    asyncio.run(run())


def test_a_noted_message_does_not_overtake_a_handler_waiting_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another message's handler task not started yet: the noted message gets a task of its own too, and
    the handlers run in the order their messages were published."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> None:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        noter, created = await _a_noter(runtime)
        try:
            await runtime.publish_message(Counted("first"), TopicId("other", "default"))
            await runtime.publish_message(Counted("second"), TopicId("notes", "default"))
            assert noter.noted == [] and created == [2]
            await asyncio.wait_for(runtime.stop_when_idle(), 5)
            assert noter.noted == ["other first", "second"]
        finally:
            asyncio.get_running_loop().set_task_factory(None)

    asyncio.run(run())


def test_a_publisher_cancelled_while_an_agent_is_made_is_told_and_the_run_is_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent made by an async factory in the publishing task: a cancellation of the publisher meanwhile
    reaches the publisher (not kept as the run's failure, for ``stop_when_idle`` to raise later)."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> None:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        making = asyncio.Event()

        async def slow() -> Any:
            making.set()
            await asyncio.Event().wait()  # cancelled below

        await runtime.register_factory("slow", slow)
        await runtime.add_subscription(TypeSubscription("to-slow", "slow"))
        runtime.start()
        publisher = asyncio.create_task(runtime.publish_message(Counted("lost"), TopicId("to-slow", "default")))
        await asyncio.wait_for(making.wait(), 5)
        publisher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await publisher
        await asyncio.wait_for(runtime.stop_when_idle(), 5)  # nothing kept to raise

    asyncio.run(run())


def test_a_kept_queue_serves_a_next_run_on_another_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that waited for its handlers (``stop_when_idle``) bound its queue's ``join()`` event to its
    loop; the queue it leaves to the next run is not bound, so that run may be on another loop."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    received: list[str] = []

    async def collect(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
        await asyncio.sleep(0)  # the stop waits for it
        received.append(message.text)

    async def one_run(text: str, register: bool) -> None:
        if register:
            await ClosureAgent.register_closure(runtime, "collector", collect, subscriptions=lambda: [TypeSubscription("notes", "collector")])
        runtime.start()
        await runtime.publish_message(Counted(text), TopicId("notes", "default"))
        await asyncio.wait_for(runtime.stop_when_idle(), 5)

    asyncio.run(one_run("first", True))
    asyncio.run(one_run("second", False))
    assert received == ["first", "second"]


def test_stop_when_leaves_a_lean_queue_for_the_next_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stop_when`` (legacy): the next run still delivers, observed or not (the stock method would leave
    a plain queue, whose messages no lean run context's loop takes)."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

    async def run() -> list[str]:
        runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
        received: list[str] = []

        async def collect(_: ClosureContext, message: Counted, ctx: MessageContext) -> None:
            received.append(message.text)

        await ClosureAgent.register_closure(runtime, "collector", collect, subscriptions=lambda: [TypeSubscription("notes", "collector")])
        runtime.start()
        await asyncio.wait_for(runtime.stop_when(lambda: True), 5)
        logging.getLogger("autogen_core").setLevel(logging.INFO)  # observed: through the queue and its loop
        try:
            runtime.start()
            await runtime.publish_message(Counted("after"), TopicId("notes", "default"))
            await asyncio.wait_for(runtime.stop_when_idle(), 5)
        finally:
            logging.getLogger("autogen_core").setLevel(logging.NOTSET)
        return received

    assert asyncio.run(run()) == ["after"]
