"""The hot path's shortcuts, tested directly (no HTTP): each does less work than the stock code it
replaces and gives the same result. Real objects throughout (AutoGen's runtime and agents, Duet's
tools and model client)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

import pytest
from autogen_core import AgentId, ClosureAgent, ClosureContext, DefaultTopicId, MessageContext
from autogen_core import SingleThreadedAgentRuntime, TopicId, TypeSubscription

from duet.agents.runtime import HandOverQueue, LeanAgentRuntime


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


def test_a_hand_over_queue_gives_futures_not_tasks() -> None:
    """A team's output queue: each message AgentChat waits for costs a future, not a task; items come
    out in order whether the get or the put comes first, and a cancelled get takes nothing."""

    async def main() -> list[Any]:
        queue = HandOverQueue()
        waiting = asyncio.ensure_future(queue.get())  # as AgentChat's run_stream waits
        assert not isinstance(waiting, asyncio.Task)
        cancelled = queue.get()
        await queue.put("first")
        cancelled.cancel()  # the second get gives up before anything is there for it
        later = queue.get()
        queue.put_nowait("second")
        queue.put_nowait("third")
        return [await waiting, cancelled.cancelled(), await later, await queue.get(), queue.empty()]

    assert asyncio.run(main()) == ["first", True, "second", "third", True]


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


# --- the agents a lean runtime makes: what is the same for each is shared ---------------------------

from dataclasses import dataclass  # noqa: E402

from autogen_agentchat.teams._group_chat._sequential_routed_agent import SequentialRoutedAgent  # noqa: E402
from autogen_core import rpc  # noqa: E402


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


@pytest.mark.parametrize("kind", ["asyncio", "autogen_core"])
def test_a_lightened_queue_holds_two_deques_fewer_and_still_joins(kind: str) -> None:
    """Unbounded: no putters' line, and the join event's waiting list only once ``join()`` waits;
    puts, gets, ``task_done`` and a waiting ``join()`` behave as before. A bounded queue is left as it is."""
    import collections

    from autogen_core._queue import Queue as AutogenQueue

    from duet.agents.runtime import lighten_queue

    make = asyncio.Queue if kind == "asyncio" else AutogenQueue

    async def run() -> list[str]:
        queue = lighten_queue(make())
        assert queue._putters == () and queue._finished._waiters == ()
        done: list[str] = []
        for item in ("a", "b"):
            await queue.put(item)
        joined = asyncio.ensure_future(queue.join())
        await asyncio.sleep(0)
        assert not joined.done() and len(queue._finished._waiters) == 1
        while not queue.empty():
            done.append(await queue.get())
            queue.task_done()
        await asyncio.wait_for(joined, 1)
        await asyncio.wait_for(queue.join(), 1)  # set: returns at once
        bounded = make(maxsize=1)
        assert lighten_queue(bounded)._putters == collections.deque() and type(bounded._finished) is asyncio.Event
        return done

    assert asyncio.run(run()) == ["a", "b"]


# --- client tools: built once per distinct entry, encoded once per tool ---------------------------

from duet.agents import OpenAICompatibleClient  # noqa: E402
from duet.agents.upstream._transform import tool_to_openai, tools_json  # noqa: E402
from duet.agents._reasoning_agent import describe_tools  # noqa: E402
from duet.workbenches import CachingToolSchema, ProxyTool, derived_from, proxy_tools_from_openai  # noqa: E402
from duet.workbenches import _tool_schemas as tool_schemas  # noqa: E402
from duet.workbenches._tool_schemas import ContentCache  # noqa: E402


def _entry(name: str = "kb.search", minimum: int = 1) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "Searches the knowledge base.",
                                             "parameters": {"type": "object", "properties": {"top": {"type": "integer", "minimum": minimum}}}}}


def test_equal_tool_entries_give_one_tool_and_one_encoding() -> None:
    first = proxy_tools_from_openai([_entry(), _entry("other")])
    again = proxy_tools_from_openai([_entry(), _entry("other")])  # equal content, new objects (a new request)
    assert [a is b for a, b in zip(first, again, strict=True)] == [True, True]
    assert tools_json([t.schema for t in first]) is not None
    encoded = derived_from(first[0].schema, "openai_json", lambda s: "derived again")
    assert encoded == json.dumps(tool_to_openai(first[0].schema), ensure_ascii=False)  # derived once, by tools_json


def test_different_tool_entries_give_different_tools_and_encodings() -> None:
    one, = proxy_tools_from_openai([_entry(minimum=1)])
    two, = proxy_tools_from_openai([_entry(minimum=2)])
    assert one is not two
    assert tools_json([one.schema]) != tools_json([two.schema])
    assert json.loads(tools_json([two.schema]))[0]["function"]["parameters"]["properties"]["top"]["minimum"] == 2


def test_a_cached_tool_is_not_changed_by_its_callers_dict() -> None:
    entry = _entry("mutable_tool")
    tool, = proxy_tools_from_openai([entry])
    entry["function"]["parameters"]["properties"]["top"]["minimum"] = 99  # the caller reuses its dict
    assert tool.schema["parameters"]["properties"]["top"]["minimum"] == 1
    changed, = proxy_tools_from_openai([entry])
    assert changed is not tool and changed.schema["parameters"]["properties"]["top"]["minimum"] == 99


def test_a_tool_list_seen_before_gives_its_tools_and_a_changed_list_keeps_its_unchanged_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    first = proxy_tools_from_openai([_entry("list_a"), _entry("list_b")])
    with monkeypatch.context() as patch:  # a list seen before is not read tool by tool
        patch.setattr(tool_schemas._tools, "get_or_make", lambda *_: pytest.fail("looked at one tool"))
        again = proxy_tools_from_openai(json.loads(json.dumps([_entry("list_a"), _entry("list_b")])))  # the next request's body
    assert [a is b for a, b in zip(first, again, strict=True)] == [True, True]
    changed = proxy_tools_from_openai([_entry("list_a"), _entry("list_b", minimum=5)])
    assert changed[0] is first[0] and changed[1] is not first[1]
    assert changed[1].schema["parameters"]["properties"]["top"]["minimum"] == 5
    assert proxy_tools_from_openai([_entry("list_b"), _entry("list_a")]) == [first[1], first[0]]  # another order, another list


def test_a_tool_list_naming_two_tools_alike_is_refused_every_time() -> None:
    twins = [_entry("twin"), _entry("twin", minimum=2)]
    for _ in range(2):
        with pytest.raises(ValueError, match="two tools are named 'twin'"):
            proxy_tools_from_openai(twins)


def test_a_tool_holding_other_objects_is_built_each_time() -> None:
    entry = _entry("odd")
    entry["function"]["parameters"]["x-marker"] = object()  # a Python caller's own object: no content key
    one, = proxy_tools_from_openai([entry])
    two, = proxy_tools_from_openai([entry])
    assert one is not two and one.schema["parameters"]["x-marker"] is entry["function"]["parameters"]["x-marker"]


def test_a_tool_list_is_validated_once_per_content_and_keyed_once() -> None:
    from pydantic import ValidationError

    from duet.api.chat._reader import client_tools_of
    from duet.api._wire import KnownTools
    from duet.api.chat._protocol import ChatCompletionRequest

    def request(*tools: dict[str, Any]) -> tuple[ChatCompletionRequest, dict[str, Any]]:
        body = json.loads(json.dumps({"model": "duet", "messages": [{"role": "user", "content": "Hi"}], "tools": tools}))
        return ChatCompletionRequest.model_validate(body), body

    first, first_body = request(_entry("checked_once"), _entry("checked_too"))
    second, second_body = request(_entry("checked_once"), _entry("checked_too"))
    assert isinstance(first.tools, KnownTools) and second.tools is first.tools  # the next request's equal list
    assert client_tools_of(second, second_body) == client_tools_of(first, first_body) == proxy_tools_from_openai(second_body["tools"])
    bad = _entry("checked_once")
    bad["function"]["parameters"]["type"] = "string"
    for _ in range(2):  # an invalid list is never kept
        with pytest.raises(ValidationError, match=r"tools.1.function.parameters"):
            request(_entry("checked_too"), bad)
    assert request(_entry("checked_once"), _entry("checked_too"))[0].tools is first.tools


def test_each_field_keeps_its_own_validated_tool_lists() -> None:
    """A list valid as two fields' types (chat tools, legacy functions, Messages tools) is validated as each."""
    from duet.api.messages._protocol import MessagesRequest
    from duet.api.messages._protocol import ToolDefinition as MessagesTool
    from duet.api._wire import FunctionDefinition
    from duet.api.chat._protocol import ChatCompletionRequest, ToolDefinition

    both = [{"type": "function", "function": {"name": "a"}, "name": "b", "input_schema": {"type": "object"}}]
    user = [{"role": "user", "content": "Hi"}]
    functions = ChatCompletionRequest.model_validate({"model": "m", "messages": user, "functions": both}).functions
    tools = ChatCompletionRequest.model_validate({"model": "m", "messages": user, "tools": both}).tools
    anthropic = MessagesRequest.model_validate({"model": "m", "max_tokens": 1, "messages": user, "tools": both}).tools
    assert isinstance(functions[0], FunctionDefinition) and isinstance(tools[0], ToolDefinition)  # type: ignore[index]
    assert isinstance(anthropic[0], MessagesTool)  # type: ignore[index]


def test_the_tool_cache_is_bounded() -> None:
    cache: ContentCache[ProxyTool] = ContentCache(max_entries=3, max_bytes=64 * 1000)
    tools = [cache.get_or_make(_entry(f"tool_{i}"), ProxyTool.from_openai) for i in range(5)]
    assert len(cache) == 3
    assert cache.get_or_make(_entry(f"tool_{4}"), ProxyTool.from_openai) is tools[4]
    assert cache.get_or_make(_entry(f"tool_{0}"), ProxyTool.from_openai) is not tools[0]  # oldest out
    small: ContentCache[ProxyTool] = ContentCache(max_entries=100, max_bytes=64 * 100)  # no entry of ~150 bytes fits
    big = small.get_or_make(_entry(), ProxyTool.from_openai)
    assert len(small) == 0 and small.get_or_make(_entry(), ProxyTool.from_openai) is not big


def test_a_changed_schema_forgets_what_was_derived() -> None:
    schema = CachingToolSchema(name="lookup", description="old")
    assert describe_tools([schema]) == describe_tools([dict(schema)])  # same text as for a plain schema
    assert "old" in describe_tools([schema])
    schema["description"] = "new"
    assert "new" in describe_tools([schema]) and "old" not in describe_tools([schema])
    schema.update(description="newer")
    assert "newer" in tools_json([schema])


def test_the_request_body_carries_the_tools_as_before() -> None:
    client = OpenAICompatibleClient("m", "http://127.0.0.1:9/v1", create_args={"temperature": 0.5})
    proxy, = proxy_tools_from_openai([_entry("é.tool")])
    service = ProxyTool("plain", "a tool given as a Tool object", {"type": "object"})
    tools = [proxy.schema, {"name": "raw", "parameters": {"type": "object"}}, service]
    body = json.loads(client._request_body([], tools, "auto", None, {}))
    assert body["tools"] == [tool_to_openai(t) for t in tools]
    assert body["tool_choice"] == "auto" and body["temperature"] == 0.5 and body["stream"] is True
    assert "tools" not in json.loads(client._request_body([], [], "auto", None, {}))


# --- one connection pool per upstream -------------------------------------------------------------

from autogen_core.models import UserMessage  # noqa: E402

from tests.scripted_upstream import Reply, ScriptedUpstream  # noqa: E402


def test_clients_of_one_upstream_share_one_connection() -> None:
    """The reasoner's call frees its connection; the answer's call, on another client of the same
    upstream, reuses it: one upstream connection per open stream, not one per client."""

    async def one_request_each(upstream: ScriptedUpstream, max_connections: int) -> tuple[int, int]:
        """Upstream connections the calls used (told apart by the client's port), and those still open
        once both clients are closed."""
        first = len(upstream.requests)
        reasoner = OpenAICompatibleClient("r1", upstream.base_url, max_connections=max_connections)
        answerer = OpenAICompatibleClient("answer", upstream.base_url + "/", max_connections=max_connections)
        for client in (reasoner, answerer, reasoner):
            result = await client.create([UserMessage(content="Hi", source="user")])
            assert result.content == "ok"
        used = len({request.peer_port for request in upstream.requests[first:]})
        await reasoner.close()
        await answerer.close()
        deadline = time.monotonic() + 5
        while upstream.open_connections and time.monotonic() < deadline:  # noqa: ASYNC110 - the upstream's count has no event
            await asyncio.sleep(0.02)
        return used, upstream.open_connections

    with ScriptedUpstream(responder=lambda body: Reply(content=["ok"])) as upstream:
        assert asyncio.run(one_request_each(upstream, 0)) == (1, 0)  # the last client to close closed the pool
        assert asyncio.run(one_request_each(upstream, 5)) == (2, 0)  # a bounded pool is the client's own


# --- the body's depth ---------------------------------------------------------------------------------

from duet.api._errors import APIError  # noqa: E402
from duet.api._validation import MAX_JSON_DEPTH, load_body  # noqa: E402


@pytest.mark.parametrize("size", ["small", "large"])  # parsed on the event loop, and in a thread after a scan
def test_a_body_nested_one_level_too_deep_is_refused(size: str) -> None:
    padding = "x" * (70 * 1024 if size == "large" else 0)

    def body(depth: int) -> bytes:  # brackets in a string do not count
        return ('{"pad": "' + padding + '", "a": ' + "[" * (depth - 1) + '"[[]]"' + "]" * (depth - 1) + "}").encode()

    assert load_body(body(MAX_JSON_DEPTH))["pad"] == padding
    with pytest.raises(APIError, match="deeper than 128 levels"):
        load_body(body(MAX_JSON_DEPTH + 1))


def test_duets_team_opens_its_agent_spans_only_when_a_tracer_provider_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a tracer provider the span around an agent's turn in Duet's team costs nothing (every
    span would be a no-op): AgentChat's span helper is not called, while a stock team calls it for each
    turn; with a provider, Duet's team opens and records it as AgentChat does."""
    from autogen_agentchat.teams._group_chat import _chat_agent_container
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans_opened: list[str] = []
    stock_span = _chat_agent_container.trace_invoke_agent_span

    def counted_span(**named: Any) -> Any:
        spans_opened.append(named["agent_name"])
        return stock_span(**named)

    monkeypatch.setattr(_chat_agent_container, "trace_invoke_agent_span", counted_span)  # this test's spy, undone after it
    for runtime in (LeanAgentRuntime, SingleThreadedAgentRuntime):
        assert asyncio.run(_run_a_team_on(runtime(ignore_unhandled_exceptions=False), duet_team=True)) == ["user", "first", "second"]
    assert spans_opened == []
    assert asyncio.run(_run_a_team_on(SingleThreadedAgentRuntime(ignore_unhandled_exceptions=False))) == ["user", "first", "second"]
    assert spans_opened == ["first", "second"]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert asyncio.run(_run_a_team_on(LeanAgentRuntime(ignore_unhandled_exceptions=False), duet_team=True)) == ["user", "first", "second"]
    assert spans_opened == ["first", "second"] * 2
    assert [span.name for span in exporter.get_finished_spans() if span.name.startswith("invoke_agent")] == [
        "invoke_agent first", "invoke_agent second"]


# --- the body's parse: orjson first, the standard library for what it refuses --------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _json_values, max_size=6), st.booleans())
def test_a_body_parses_to_exactly_what_the_standard_library_reads(body: dict[str, Any], ascii_only: bool) -> None:
    """Integers of any size (orjson holds 64 bits), floats, any text (as UTF-8 or as escapes, surrogate
    pairs included): the same values of the same types."""
    raw = json.dumps(body, ensure_ascii=ascii_only).encode()
    expected = json.loads(raw)
    parsed = load_body(raw)
    assert parsed == expected
    assert _types(parsed) == _types(expected)


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value)


# --- a team's registrations on a lean runtime ----------------------------------------------------

async def _run_a_team_on(runtime: SingleThreadedAgentRuntime, *, duet_team: bool = False) -> list[str]:
    """A team of two AgentChat agents with scripted models, run once on ``runtime``; who spoke. A
    plain AgentChat team, or (``duet_team``) one of the class Duet serves its teams in."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from duet.agents.pipeline._team_factory import _RoundRobinTeam

    team = (_RoundRobinTeam if duet_team else RoundRobinGroupChat)(
        [AssistantAgent("first", ReplayChatCompletionClient(["one"])), AssistantAgent("second", ReplayChatCompletionClient(["two"]))],
        termination_condition=MaxMessageTermination(3), runtime=runtime)
    runtime.start()
    result = await asyncio.wait_for(team.run(task="go"), 5)
    await runtime.stop_when_idle()
    return [message.source for message in result.messages]


def test_duets_team_draws_no_subscription_id_and_a_lean_runtime_caches_no_recipients() -> None:
    """A two-agent team registers ten subscriptions when it first runs; Duet's team adds them as their
    lean kind, none with its uuid drawn (drawn when read: stable, a uuid4), each direct-message one
    without a prefix string of its own, and a lean runtime keeps no topic's recipients. A team runs
    the same, a subscription added twice is refused, and one removed by its id no longer delivers."""
    from autogen_core import TypePrefixSubscription


    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert asyncio.run(_run_a_team_on(runtime, duet_team=True)) == ["user", "first", "second"]
    assert asyncio.run(_run_a_team_on(SingleThreadedAgentRuntime(ignore_unhandled_exceptions=False), duet_team=True)) == [
        "user", "first", "second"]
    manager = runtime._subscription_manager
    subscriptions = list(manager.subscriptions)
    assert sorted(type(subscription).__name__ for subscription in subscriptions) == [
        "LeanTypePrefixSubscription"] * 3 + ["LeanTypeSubscription"] * 7
    assert all(subscription._id is None for subscription in subscriptions)
    assert all(subscription._topic_type_prefix is None for subscription in subscriptions if isinstance(subscription, TypePrefixSubscription))
    assert not hasattr(manager, "_subscribed_recipients") and not manager._seen_topics
    assert manager._seen_topics is LeanAgentRuntime()._subscription_manager._seen_topics  # one empty set for all

    async def add_remove() -> None:
        first = next(subscription for subscription in subscriptions if isinstance(subscription, TypeSubscription))
        with pytest.raises(ValueError, match="already exists"):
            await runtime.add_subscription(TypeSubscription(first.topic_type, first.agent_type))
        assert all(subscription._id is None for subscription in subscriptions)
        assert uuid.UUID(first.id).version == 4 and first.id == first.id
        topic = TopicId(first.topic_type, "key")
        assert first.map_to_agent(topic) in await manager.get_subscribed_recipients(topic)
        await runtime.remove_subscription(first.id)
        assert first.map_to_agent(topic) not in await manager.get_subscribed_recipients(topic)

    asyncio.run(add_remove())


def test_a_lean_runtime_keeps_stock_subscriptions_as_their_lean_kind_with_their_ids() -> None:
    """Any other team (or anyone) adding autogen-core's subscriptions to a lean runtime: they are kept
    as their lean kind (a direct-message one without its prefix string) with the ids they were made
    with, so whoever made one removes it by its id; a subscription of another kind is kept as it is."""
    from autogen_core import DefaultSubscription, TypePrefixSubscription

    from duet.agents.runtime._subscriptions import LeanTypePrefixSubscription, LeanTypeSubscription

    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert asyncio.run(_run_a_team_on(runtime)) == ["user", "first", "second"]
    kept = list(runtime._subscription_manager.subscriptions)
    assert sorted(type(subscription).__name__ for subscription in kept) == ["LeanTypePrefixSubscription"] * 3 + ["LeanTypeSubscription"] * 7
    assert all(isinstance(subscription._id, str) for subscription in kept)  # drawn as autogen-core draws them

    async def by_hand() -> None:
        manager = runtime._subscription_manager
        direct, other = TypePrefixSubscription("writer:", "writer"), DefaultSubscription(topic_type="notes", agent_type="writer")
        for subscription in (direct, other):
            await runtime.add_subscription(subscription)
        [lean_direct] = [subscription for subscription in manager.subscriptions if subscription.id == direct.id]
        assert type(lean_direct) is LeanTypePrefixSubscription and lean_direct == direct and lean_direct._topic_type_prefix is None
        assert manager.subscriptions[-1] is other
        with pytest.raises(ValueError, match="already exists"):
            await runtime.add_subscription(TypePrefixSubscription("writer:", "writer"))
        for subscription in (direct, other):
            await runtime.remove_subscription(subscription.id)
        assert not await manager.get_subscribed_recipients(TopicId("writer:", "key"))
        assert not await manager.get_subscribed_recipients(TopicId("notes", "key"))
        one, same = LeanTypeSubscription("t", "a"), LeanTypeSubscription("t", "a")
        assert one == same and one != LeanTypeSubscription("u", "a") and one._id is None and same._id is None  # compared, no id drawn

    asyncio.run(by_hand())


def test_a_lean_runtime_registers_agent_types_without_a_closure_each_and_makes_agents_as_the_stock_one() -> None:
    """No wrapper closure per agent type (nor the annotations dict reading its signature leaves on it);
    the agents are made in their instantiation context and a factory of the wrong class is refused,
    as the stock runtime does; an instance cannot be registered to a factory's type."""
    from autogen_core import RoutedAgent

    from duet.agents.runtime._agents import AgentFactory

    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert asyncio.run(_run_a_team_on(runtime)) == ["user", "first", "second"]
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
        await asyncio.sleep(0.01)
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
        assert asyncio.run(_run_a_team_on(recording(kind), duet_team=True)) == ["user", "first", "second"]
    assert len(requests) == 4 and all(type(request) is GroupChatRequestPublish for request in requests)
    assert all(request is requests[0] for request in requests)
    with pytest.raises(ValueError, match="no field"):
        requests[0].text = "changed"
    shared = requests[0]
    requests.clear()
    for kind in (LeanAgentRuntime, SingleThreadedAgentRuntime):
        assert asyncio.run(_run_a_team_on(recording(kind))) == ["user", "first", "second"]
    assert len(requests) == 4 and len({id(request) for request in requests} | {id(shared)}) == 5


def test_a_direct_message_subscription_keeps_no_prefix_string_and_matches_as_the_stock_one() -> None:
    """Each registered agent type's subscription to its direct messages ("<type>:...") keeps no
    prefix string of its own; it matches, maps and compares as autogen-core's."""
    from autogen_core import TypePrefixSubscription

    from duet.agents.runtime._subscriptions import LeanTypePrefixSubscription

    lean = LeanTypePrefixSubscription("writer:", "writer")
    stock = TypePrefixSubscription("writer:", "writer")
    assert type(lean) is not TypePrefixSubscription and isinstance(lean, TypePrefixSubscription)
    assert lean._topic_type_prefix is None and lean.topic_type_prefix == "writer:" and lean == stock
    for topic in ("writer:", "writer:draft", "writer", "writers:", "write:", "other:writer:"):
        topic_id = TopicId(topic, "key")
        assert lean.is_match(topic_id) == stock.is_match(topic_id), topic
        if stock.is_match(topic_id):
            assert lean.map_to_agent(topic_id) == stock.map_to_agent(topic_id)
    other = LeanTypePrefixSubscription("notes.", "writer")  # any other prefix is kept as given
    assert other.topic_type_prefix == "notes." and other.is_match(TopicId("notes.1", "k")) and other != lean
