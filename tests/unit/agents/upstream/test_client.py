"""The upstream model client (``agents/upstream/_client.py``) against the scripted upstream on loopback:
what servers send reassembled, a first token handed on before the rest is read, cancellation, reasoning
typed, the component round trip."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from autogen_core import CancellationToken
from autogen_core.models import UserMessage
from duet.agents import OpenAICompatibleClient, UpstreamConnectionError
from duet.agents._thinking import ReasoningText
from duet.agents.upstream import STREAMED_TEXT_UNKEPT_ARG

from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from tests.waiting import until


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


def test_model_client_keeps_no_copy_of_the_text_its_caller_keeps() -> None:
    """With ``STREAMED_TEXT_UNKEPT_ARG`` the pieces are the same, the result carries no text (its usage
    as ever), and the argument is never sent upstream."""

    async def main(upstream: ScriptedUpstream) -> None:
        client = OpenAICompatibleClient("m", upstream.base_url)
        upstream.script("m", Reply(reasoning=["r"], content=["c"]))
        items = [item async for item in client.create_stream([UserMessage(content="x", source="user")],
                                                             extra_create_args={STREAMED_TEXT_UNKEPT_ARG: True, "temperature": 0})]
        result = items[-1]
        assert items[:-1] == ["r", "c"] and result.content == "" and result.thought is None and result.usage.completion_tokens > 0
        assert STREAMED_TEXT_UNKEPT_ARG not in upstream.requests[-1].body and upstream.requests[-1].body["temperature"] == 0
        await client.close()

    with ScriptedUpstream() as upstream:
        asyncio.run(main(upstream))


def test_model_client_closes_its_event_reader_when_the_stream_ends() -> None:
    """The reader of the upstream's events (an async generator, left at its last read when the answer
    has ended) is closed by the stream as it ends (issue 28): not by the event loop's finalizer once it
    is collected, which costs a task for its ``aclose()`` each, two a request."""
    readers: list[Any] = []

    async def main(upstream: ScriptedUpstream) -> None:
        first_iteration, finalizer = sys.get_asyncgen_hooks()

        def noted(generator: Any) -> None:
            if generator.ag_code.co_name == "sse_data":
                readers.append(generator)
            if first_iteration is not None:
                first_iteration(generator)

        sys.set_asyncgen_hooks(noted, finalizer)  # the loop's own are put back as asyncio.run ends
        client = OpenAICompatibleClient("m", upstream.base_url)
        upstream.script("m", Reply(reasoning=["r"], content=["a", "b"]))
        items = [item async for item in client.create_stream([UserMessage(content="x", source="user")])]
        assert "".join(items[:-1]) == "rab" and items[-1].content == "ab"
        assert len(readers) == 1 and readers[0].ag_frame is None  # closed, while still referenced here
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
            await until(lambda: upstream.requests[-1].ended.is_set(), "the upstream has written the whole answer")  # to the socket, unread
            rest = [item async for item in stream]
            assert connection.transport is None or connection.transport.is_reading()  # read again (or back in the pool)
            assert "".join(rest[:-1]) == "".join(f"r{i} " for i in range(1, 40)) + "done"
        await client.close()

    with ScriptedUpstream() as upstream:
        asyncio.run(main(upstream))


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
        await until(lambda: upstream.requests, "the request reaches the upstream")  # its answer would come after 10 s
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
