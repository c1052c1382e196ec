"""The pure parts: think-tag splitting, message conversion, tool aliases, the model client's parser."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp.client_proto import ResponseHandler
from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage, SystemMessage, UserMessage

from duet.agents import ConversationError, OpenAICompatibleClient, UpstreamConnectionError, conversation_from_openai
from duet.agents.upstream import _transport as upstream_transport
from duet.agents._conversation import MISSING_RESULT, as_transcript
from duet.agents._thinking import ReasoningSplitter, ReasoningText, strip_think_blocks
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from duet.workbenches import DuetWorkbench, ProxyTool, model_safe_name


def split(pieces: list[str]) -> tuple[str, str]:
    splitter = ReasoningSplitter()
    reasoning, content = "", ""
    for piece in pieces:
        r, c = splitter.feed(piece)
        reasoning, content = reasoning + r, content + c
    r, c = splitter.flush()
    return reasoning + r, content + c


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["<think>", "a", "b", "</think>", "answer"], ("ab", "answer")),  # the stock client's markers
        (["<think>plan</think>\n\nHi"], ("plan", "Hi")),
        (["  <th", "ink>x</thi", "nk>", "\n\n", "y"], ("x", "y")),  # tags split anywhere
        (["Hello <think> is a tag"], ("", "Hello <think> is a tag")),  # not at the start: content
        (["<think>never closed"], ("never closed", "")),
        (["plain ", "text"], ("", "plain text")),
        (["<", "b>bold</b>"], ("", "<b>bold</b>")),
        (["<think>a < b </think>c"], ("a < b ", "c")),
        ([ReasoningText("a <"), ReasoningText("/think> b"), "\n\n", "c"], ("a </think> b", "c")),  # typed: nothing parsed
        (["\n", ReasoningText("r"), "c <think>"], ("r", "c <think>")),  # after typed reasoning, tags are text
        ([ReasoningText("never answered")], ("never answered", "")),
    ],
)
def test_reasoning_splitter(pieces: list[str], expected: tuple[str, str]) -> None:
    assert split(pieces) == expected


def test_strip_think_blocks() -> None:
    assert strip_think_blocks("<think>\nplan\n</think>\n\nAnswer") == "Answer"
    assert strip_think_blocks("<think>a</think>one<think>b</think>two") == "onetwo"
    assert strip_think_blocks("no tags") == "no tags"


def test_model_safe_names() -> None:
    assert model_safe_name("get_weather-2") == "get_weather-2"
    alias = model_safe_name("kb.search/v2")
    assert alias.startswith("kb_search_v2_") and alias == model_safe_name("kb.search/v2")
    assert model_safe_name("kb.search/v2") != model_safe_name("kb_search/v2")
    assert len(model_safe_name("x" * 200)) <= 64


def test_workbench_shadows_service_tools_with_client_tools() -> None:
    from autogen_core.tools import FunctionTool

    def lookup(query: str) -> str:
        return query

    service = FunctionTool(lookup, description="service lookup")
    other = FunctionTool(lookup, description="another service tool", name="other")
    client = ProxyTool("lookup", "client lookup", {"type": "object"})
    workbench = DuetWorkbench.for_request([service, other], [client])
    assert [t.name for t in workbench.tools] == ["lookup", "other"] and workbench.client_tool("lookup") is client
    assert workbench.service_tools == [other] and workbench.client_tool("other") is None
    workbench = DuetWorkbench.for_request([service, other], [])
    assert workbench.service_tools == [service, other] and [t.name for t in workbench.tools] == ["lookup", "other"]
    workbench = DuetWorkbench.for_request([service], [client])
    schemas = asyncio.run(workbench.list_tools())
    assert schemas == [{"name": "lookup", "description": "client lookup", "parameters": {"type": "object"}}]


def test_plain_text_turns_convert_like_every_other_turn() -> None:
    """Plain text turns take a short way (most of a long history); a call left without a result is
    still closed before the next text turn."""
    conversation = conversation_from_openai([
        {"role": "system", "content": "Rules."},
        {"role": "developer", "content": "More rules."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>greet</think>Hello!"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "Never mind."},
        {"role": "assistant", "content": "OK.", "tool_calls": None},
    ])
    assert conversation == [
        SystemMessage(content="Rules."),
        SystemMessage(content="More rules."),
        UserMessage(content="Hi", source="user"),
        AssistantMessage(content="Hello!", source="assistant"),
        AssistantMessage(content=[FunctionCall(id="c1", name="f", arguments="{}")], source="assistant"),
        FunctionExecutionResultMessage(content=[FunctionExecutionResult(content=MISSING_RESULT, call_id="c1", name="f", is_error=True)]),
        UserMessage(content="Never mind.", source="user"),
        AssistantMessage(content="OK.", source="assistant"),
    ]
    assert [m.model_fields_set for m in conversation[:4]] == [{"content"}, {"content"}, {"content", "source"}, {"content", "source"}]


def test_conversation_repairs_and_strictness() -> None:
    conversation = conversation_from_openai(
        [
            {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "ra"},
            {"role": "tool", "tool_call_id": "zzz", "name": "h", "content": "orphan"},
        ]
    )
    assert isinstance(conversation[0], SystemMessage) and conversation[0].content == "rules"
    assert isinstance(conversation[2], AssistantMessage) and conversation[2].content[0].arguments == '{"x": 1}'  # type: ignore[union-attr]
    results = conversation[3]
    assert isinstance(results, FunctionExecutionResultMessage)
    assert [(r.call_id, r.content) for r in results.content] == [("a", "ra"), ("b", MISSING_RESULT)]
    assert isinstance(conversation[4], UserMessage) and "orphan" in conversation[4].content  # type: ignore[operator]
    with pytest.raises(ConversationError) as error:
        conversation_from_openai([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {}}]}])
    assert error.value.param == "messages[1].tool_calls[0]"


def test_transcript_for_a_reasoner_without_tools() -> None:
    transcript = as_transcript(conversation_from_openai([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "looking", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "42"},
        {"role": "user", "content": "and?"},
    ]))
    assert [type(m).__name__ for m in transcript] == ["UserMessage", "AssistantMessage", "UserMessage"]
    assert transcript[2].content == "[tool f returned]\n42\n\nand?"


def test_transcript_merges_a_long_run_in_linear_time() -> None:
    """4,096 user messages of 7 KB (within the limits) merge into one: rebuilding the merged text
    per message took 2.2 s of event loop; joining once takes milliseconds."""
    conversation = conversation_from_openai([{"role": "system", "content": "s"}]
                                            + [{"role": "user", "content": f"{i}" + "x" * 7168} for i in range(4096)])
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        transcript = as_transcript(conversation)
        best = min(best, time.perf_counter() - started)
    assert [type(m).__name__ for m in transcript] == ["SystemMessage", "UserMessage"]
    assert transcript[1].content == "\n\n".join(m.content for m in conversation[1:])  # type: ignore[misc]
    assert best < 0.3, f"merging took {best:.2f} s"


def test_model_client_reassembles_what_servers_send() -> None:
    """Interleaved parallel calls, CRLF framing, repeated names, then a truncated stream."""

    async def main(upstream: ScriptedUpstream) -> None:
        client = OpenAICompatibleClient("m", upstream.base_url)
        upstream.script("m", Reply(reasoning=["r"], content=["c"], tool_calls=[ScriptedCall("f", '{"a": 1}'), ScriptedCall("g", '{"b": 2}')],
                                   interleave_calls=True))
        items = [item async for item in client.create_stream([UserMessage(content="x", source="user")])]
        result = items[-1]
        assert items[:-1] == ["r", "c"] and [type(item) for item in items[:-1]] == [ReasoningText, str]
        assert [(c.name, json.loads(c.arguments)) for c in result.content] == [("f", {"a": 1}), ("g", {"b": 2})]
        assert result.thought == "c" and result.finish_reason == "function_calls"
        upstream.script("m", Reply(content=["a", "b"], crlf=True))
        items = [item async for item in client.create_stream([UserMessage(content="x", source="user")])]
        assert items[:-1] == ["a", "b"] and items[-1].content == "ab"
        upstream.script("m", Reply(content=["partial"], fault="disconnect", fault_after=2))
        with pytest.raises(UpstreamConnectionError):
            async for _ in client.create_stream([UserMessage(content="x", source="user")]):
                pass
        await client.close()

    with ScriptedUpstream() as upstream:
        asyncio.run(main(upstream))


def test_model_client_reads_no_further_while_its_first_token_is_handed_on() -> None:
    """The first token goes on before the rest of its burst is read: the connection is not read
    while the caller has its turn, and is read again after (the whole answer arrives, and the pooled
    connection serves the next call)."""

    async def main(upstream: ScriptedUpstream) -> None:
        client = OpenAICompatibleClient("m", upstream.base_url)
        for _ in range(2):  # the second call reuses the pooled connection
            upstream.script("m", Reply(reasoning=[f"r{i} " for i in range(40)], content=["done"], delay_between=0.002))
            stream = client.create_stream([UserMessage(content="x", source="user")])
            first = await stream.__anext__()
            (connection,) = client._get_session().connector._acquired  # type: ignore[union-attr]
            assert first == "r0 " and not connection.transport.is_reading()  # held while the caller has the token
            await asyncio.sleep(0.2)  # the rest of the answer has arrived at the socket meanwhile
            rest = [item async for item in stream]
            assert connection.transport is None or connection.transport.is_reading()  # read again (or back in the pool)
            assert "".join(rest[:-1]) == "".join(f"r{i} " for i in range(1, 40)) + "done"
        await client.close()

    with ScriptedUpstream() as upstream:
        asyncio.run(main(upstream))


def test_model_client_connections_run_in_a_context_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call is sent from the caller's own task (no task of its own), but the connection it opens,
    which stays in the pool for later calls, never runs in the context of the request that opened it
    (in a run, that context holds the whole request), nor in that of a request whose first token held
    its reading: on asyncio's own event loop and on uvloop's. The token keeps nothing of a call that
    ended but the response's abort."""
    request: contextvars.ContextVar[str | None] = contextvars.ContextVar("request", default=None)
    seen: list[str | None] = []
    data_received = ResponseHandler.data_received

    def watched(self: ResponseHandler, data: bytes) -> None:
        if data:  # from the event loop (aiohttp itself calls it with b"" from the reading task)
            seen.append(request.get())
        data_received(self, data)

    monkeypatch.setattr(ResponseHandler, "data_received", watched)

    async def call(client: OpenAICompatibleClient, name: str) -> None:
        request.set(name)
        tasks = len(asyncio.all_tasks())
        token = CancellationToken()
        stream = client.create_stream([UserMessage(content="x", source="user")], cancellation_token=token)
        assert await stream.__anext__() == "r0 "  # the connection was held, then read again, in this request's turn
        assert len(asyncio.all_tasks()) == tasks
        assert [item async for item in stream][-1].content == "done"
        assert len(token._callbacks) == 1  # the response's abort (weakly held); the request's canceller is gone

    async def main(upstream: ScriptedUpstream) -> None:
        client = OpenAICompatibleClient("m", upstream.base_url)
        for name in ("first", "second"):  # a new connection, then the pooled one
            upstream.script("m", Reply(reasoning=[f"r{i} " for i in range(5)], content=["done"], delay_between=0.002))
            await asyncio.create_task(call(client, name))
        await client.close()

    with ScriptedUpstream() as upstream:
        for loop_factory in (asyncio.new_event_loop, uvloop.new_event_loop):
            seen.clear()
            upstream.requests.clear()
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(main(upstream))
            assert len({r.peer_port for r in upstream.requests}) == 1  # both calls on one pooled connection
            assert seen and set(seen) == {None}, seen


def test_a_connection_opened_as_its_request_is_cancelled_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection opens in a task of its own (a context of its own): one that is ready just as the
    request that asked for it is cancelled belongs to nobody, and is closed, not left open."""
    closed: list[bool] = []

    class Opened:
        def close(self) -> None:
            closed.append(True)

    async def main() -> None:
        requesting: asyncio.Task[Any] | None = None

        async def open_connection(self: aiohttp.TCPConnector, req: Any, traces: Any, timeout: Any) -> Opened:
            await asyncio.sleep(0.01)
            assert requesting is not None
            asyncio.get_running_loop().call_soon(requesting.cancel)  # before the request's task takes the connection
            return Opened()

        monkeypatch.setattr(aiohttp.TCPConnector, "_create_connection", open_connection)
        connector = upstream_transport.Connector()
        requesting = asyncio.create_task(connector._create_connection(None, [], None))
        with pytest.raises(asyncio.CancelledError):
            await requesting
        await asyncio.sleep(0)
        assert closed == [True]
        await connector.close()

    asyncio.run(main())


def test_model_client_stops_a_request_on_its_way_when_the_token_is_cancelled() -> None:
    """A token cancelled while the upstream has not answered yet: the call raises CancelledError at
    once, the connection is dropped, and the calling task is not left cancelling (a time limit on
    the call reads that to tell itself from the request's cancellation)."""

    async def call(client: OpenAICompatibleClient, token: CancellationToken) -> int:
        try:
            async for _ in client.create_stream([UserMessage(content="x", source="user")], cancellation_token=token):
                pass
        except asyncio.CancelledError:
            return asyncio.current_task().cancelling()  # type: ignore[union-attr]
        raise AssertionError("the call was not stopped")

    async def main(upstream: ScriptedUpstream) -> None:
        client = OpenAICompatibleClient("m", upstream.base_url)
        upstream.script("m", Reply(content=["late"], delay=10))
        token = CancellationToken()
        task = asyncio.create_task(call(client, token))
        await asyncio.sleep(0.3)  # the request is out; its answer would come after 10 s
        assert len(upstream.requests) == 1
        token.cancel()
        assert await asyncio.wait_for(task, 2) == 0
        assert await asyncio.to_thread(upstream.requests[0].ended.wait, 5) and upstream.requests[0].aborted
        await client.close()

    with ScriptedUpstream() as upstream:
        asyncio.run(main(upstream))


def test_model_client_types_reasoning_in_a_plain_json_completion() -> None:
    """An upstream that ignores ``stream: true`` answers with one JSON body: the same typed pieces."""

    async def main(upstream: ScriptedUpstream) -> None:
        client = OpenAICompatibleClient("m", upstream.base_url)
        upstream.script("m", Reply(reasoning=["r1 ", "r2"], content=["c"], body="completion"))
        items = [item async for item in client.create_stream([UserMessage(content="x", source="user")])]
        assert items[:-1] == ["r1 r2", "c"] and [type(item) for item in items[:-1]] == [ReasoningText, str]
        assert items[-1].thought == "r1 r2" and items[-1].content == "c"
        await client.close()

    with ScriptedUpstream() as upstream:
        asyncio.run(main(upstream))


def test_model_client_component_round_trip() -> None:
    from autogen_core.models import ChatCompletionClient

    client = OpenAICompatibleClient("m", "http://h/v1", api_key="secret", api_key_env="MY_KEY", create_args={"temperature": 0.1})
    dumped = client.dump_component()
    assert "secret" not in dumped.model_dump_json()
    loaded = ChatCompletionClient.load_component(dumped)
    assert isinstance(loaded, OpenAICompatibleClient) and loaded.model == "m" and loaded.base_url == "http://h/v1"


def test_continuation_stores_expire(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Entries live for their TTL, in every store; any of a round's call ids finds the round."""
    import time as clock

    from autogen_core import FunctionCall

    from duet.agents.continuations import Continuation, MemoryContinuationStore, SQLiteContinuationStore, open_store

    turn = [AssistantMessage(content=[FunctionCall(id="c1", name="f", arguments="{}")], source="a"),
            FunctionExecutionResultMessage(content=[])]
    continuation = Continuation(turn=turn, reasoning="why")

    async def main() -> None:
        for store in (SQLiteContinuationStore(tmp_path / "s.db", ttl=0.3), MemoryContinuationStore(ttl=0.3)):
            await store.put(["c1", "c2"], continuation)
            assert (await store.get(["zz", "c2"])) == continuation
            clock.sleep(0.4)  # noqa: ASYNC251 - the entries' time runs out; nothing else runs meanwhile
            assert await store.get(["c1"]) is None
            await store.close()

    asyncio.run(main())
    assert type(open_store(f"sqlite:///{tmp_path}/x.db").store).__name__ == "SQLiteContinuationStore"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unsupported state URL"):
        open_store("postgres://x")


def _chunked_response(chunks: list[bytes], failure: BaseException | None = None) -> Any:
    """What ``sse_data`` reads of a response (its body, through aiohttp's own stream reader), whose
    chunked body's ``chunks`` all arrived before the first read, then its end, or ``failure`` (the
    connection broke). Made inside the running loop."""
    import types

    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.streams import StreamReader

    loop = asyncio.get_running_loop()
    content = StreamReader(BaseProtocol(loop), 2**16, loop=loop)
    for chunk in chunks:
        content.begin_http_chunk_receiving()
        content.feed_data(chunk)
        content.end_http_chunk_receiving()
    if failure is None:
        content.feed_eof()
    else:
        content.set_exception(failure)
    return types.SimpleNamespace(content=content)


def _sse_events(chunks: list[bytes], one_chunk_at_a_time: bool) -> list[list[bytes]]:
    """What ``sse_data`` yields for a chunked body whose ``chunks`` all arrived before the first read."""
    from duet.agents.upstream._sse import sse_data

    async def main() -> list[list[bytes]]:
        return [events async for events in sse_data(_chunked_response(chunks), lambda: one_chunk_at_a_time)]

    return asyncio.run(main())


def test_sse_parser_handles_crlf_split_across_reads() -> None:
    stream = b"data: one\r\n\r\n: comment\r\n\r\ndata: two\r\n\r\ndata: [DONE]\r\n\r\n"
    for one_chunk_at_a_time in (True, False):
        for cut in range(1, len(stream)):  # every possible read boundary, CR|LF splits included
            events = _sse_events([stream[:cut], stream[cut:]], one_chunk_at_a_time)
            assert [data for batch in events for data in batch] == [b"one", b"two", b"[DONE]"], cut


def test_sse_parser_hands_on_the_first_chunk_before_reading_the_rest_of_a_burst() -> None:
    from duet.agents.upstream._sse import SINGLE_CHUNK_READS

    burst = [b"data: %d\n\n" % n for n in range(40)]
    # All at once when the caller wants whole reads: one read, one list.
    assert _sse_events(burst, one_chunk_at_a_time=False) == [[b"%d" % n for n in range(40)]]
    # Chunk by chunk while the caller waits for its first token, then the rest in one read.
    events = _sse_events(burst, one_chunk_at_a_time=True)
    assert events[:SINGLE_CHUNK_READS] == [[b"%d" % n] for n in range(SINGLE_CHUNK_READS)]
    assert events[SINGLE_CHUNK_READS:] == [[b"%d" % n for n in range(SINGLE_CHUNK_READS, 40)]]


def test_sse_parser_hands_on_what_arrived_before_the_connection_broke() -> None:
    """aiohttp raises a broken connection's error before it hands over what it had received: the
    events that arrived come first, then the error (whether reads take one chunk or all)."""
    import aiohttp

    from duet.agents.upstream._sse import sse_data

    async def read(one_chunk_at_a_time: bool, chunks: list[bytes]) -> tuple[list[bytes], BaseException | None]:
        response = _chunked_response(chunks, aiohttp.ClientPayloadError("Response payload is not completed"))
        received: list[bytes] = []
        try:
            async for events in sse_data(response, lambda: one_chunk_at_a_time):
                received += events
        except aiohttp.ClientPayloadError as exc:
            return received, exc
        return received, None

    burst = [b"data: %d\n\n" % n for n in range(20)] + [b"data: cut sho"]
    for one_chunk_at_a_time in (True, False):
        received, error = asyncio.run(read(one_chunk_at_a_time, burst))
        assert received == [b"%d" % n for n in range(20)] and isinstance(error, aiohttp.ClientPayloadError)
    received, error = asyncio.run(read(True, []))  # nothing had arrived: the error at once
    assert received == [] and isinstance(error, aiohttp.ClientPayloadError)


def test_function_tool_arguments_keep_their_types() -> None:
    from duet.workbenches import PythonFunctionTool

    tool = PythonFunctionTool("tests.service_tools_fixtures:report")
    result = asyncio.run(tool.run_json({"window": {"days": 3}, "tags": ["a", "b"]}, cancellation_token=None))  # type: ignore[arg-type]
    assert result == "3:a,b"


def test_http_tool_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from duet.workbenches import HttpToolSettings

    monkeypatch.setenv("WEATHER_TOKEN", "s3cret")
    tool = HttpToolSettings(name="w", url="https://api.example.com/w/{city}", headers={"Authorization": "Bearer ${WEATHER_TOKEN}"}).build()
    assert tool.server_params.headers == {"Authorization": "Bearer s3cret"}
    dumped = tool.dump_component().model_dump_json()
    assert "s3cret" not in dumped and "${WEATHER_TOKEN}" in dumped  # exports keep the reference
    from autogen_core.tools import BaseTool

    assert BaseTool.load_component(tool.dump_component()).server_params.headers == {"Authorization": "Bearer s3cret"}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="cannot carry a query"):
        HttpToolSettings(name="w", url="https://api.example.com/w?key=abc").build()


def test_internal_errors_do_not_leak_details() -> None:
    from duet.api._errors import as_api_error

    error = as_api_error(RuntimeError('Traceback (most recent call last):\n  File "/site-packages/x.py"'))
    assert error.status == 500 and "Traceback" not in error.detail.message and "site-packages" not in error.detail.message


def test_environment_wins_over_the_yaml(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from duet.api import ServiceConfig

    config = tmp_path / "duet.yaml"
    config.write_text("ping_interval: 0.3\nstate_url: memory://\npipelines: [{name: a, answer: {model: m}}]\n")
    monkeypatch.setenv("DUET_CONFIG", str(config))
    assert (ServiceConfig.from_env().ping_interval, ServiceConfig.from_env().state_url) == (0.3, "memory://")
    monkeypatch.setenv("DUET_PING_INTERVAL", "9")
    monkeypatch.setenv("DUET_STATE_URL", "sqlite:///x.db")
    assert (ServiceConfig.from_env().ping_interval, ServiceConfig.from_env().state_url) == (9.0, "sqlite:///x.db")
