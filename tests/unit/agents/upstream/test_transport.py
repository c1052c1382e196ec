"""The upstream client's connections (``agents/upstream/_transport.py``): opened in a context of their own,
closed when opened as their request is cancelled."""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp.client_proto import ResponseHandler
from autogen_core import CancellationToken
from autogen_core.models import UserMessage
from duet.agents import OpenAICompatibleClient
from duet.agents.upstream import _transport as upstream_transport

from tests.scripted_upstream import Reply, ScriptedUpstream


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


def test_a_model_calls_response_keeps_no_raw_headers_nor_the_requests_headers() -> None:
    """Once its headers are read, a model call's response lets go of what the client never reads again
    (memory per open stream): the raw header bytes and the request's headers (a key among them). The
    parsed headers, the request's URL and method stay."""

    async def main(upstream: ScriptedUpstream) -> None:
        client = OpenAICompatibleClient("m", upstream.base_url, api_key="sk-kept-by-no-response")
        try:
            body = client._request_body([UserMessage(content="Hi", source="user")], [], "auto", None, {})
            response = await client._send(client._url, body, None)
            try:
                assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")
                assert response.raw_headers == () and len(response.request_info.headers) == 0
                assert (response.request_info.url, response.request_info.method) == (client._url, "POST")
                assert b"data:" in await response.content.readany()
            finally:
                response.close()
        finally:
            await client.close()

    with ScriptedUpstream(responder=lambda body: Reply(content=["ok"])) as upstream:
        asyncio.run(main(upstream))
