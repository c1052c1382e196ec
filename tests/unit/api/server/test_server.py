"""How many client connections the open-file limit leaves room for: each running completion holds an
upstream connection beside its client's."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Iterator

from duet.api._settings import ServiceOptions
from duet.api.server._server import FILES_BESIDES_CONNECTIONS, connections_that_fit


def test_the_defaults_fit_a_container_limit() -> None:
    """A container's usual limit (1,048,576) holds the default caps whole."""
    options = ServiceOptions()
    assert connections_that_fit(options, 1 << 20) > options.max_connections


def test_each_running_completion_keeps_a_file_for_its_upstream() -> None:
    options = ServiceOptions(max_concurrent_requests=1000, max_connections=4000)
    assert connections_that_fit(options, 4000) == 4000 - FILES_BESIDES_CONNECTIONS - 1000


def test_a_small_limit_is_shared_between_clients_and_upstreams() -> None:
    """At 1,024 files (a shell's default) the cap on completions cannot have its upstreams whole: half of
    what is left goes to client connections, half to the upstream connections of running completions."""
    options = ServiceOptions(max_concurrent_requests=1024)
    usable = 1024 - FILES_BESIDES_CONNECTIONS
    assert connections_that_fit(options, 1024) == usable - usable // 2


def test_a_tiny_limit_still_leaves_one_connection() -> None:
    assert connections_that_fit(ServiceOptions(), 3) >= 1


def test_direct_body_writes_only_while_the_body_takes_them_now() -> None:
    """A chunk of a started chunked body is framed as uvicorn frames it and written at once; never
    before the status line, after the end, to a client that is gone, to a paused transport (the
    usual ``send`` then waits for the client) or while writes are held."""
    import types

    from duet.api.server._server import DirectBodyWrites, _HeldWrites

    class Cycle(types.SimpleNamespace):  # uvicorn's request-response cycle, as far as it is read (weakly referable)
        pass

    written: list[bytes] = []
    transport = types.SimpleNamespace(write=written.append)
    cycle = Cycle(chunked_encoding=True, response_started=True, response_complete=False, disconnected=False,
                  flow=types.SimpleNamespace(write_paused=False), transport=transport)
    direct = DirectBodyWrites(cycle)
    assert direct.writable()
    direct.write(b"data: {}\n\n")
    assert written == [b"a\r\ndata: {}\n\n\r\n"]
    for name, value in (("response_started", False), ("response_complete", True), ("disconnected", True), ("chunked_encoding", False)):
        setattr(cycle, name, value)
        assert not direct.writable(), name
        setattr(cycle, name, not value)
    cycle.flow.write_paused = True
    assert not direct.writable()
    cycle.flow.write_paused = False
    cycle.transport = _HeldWrites(transport)  # type: ignore[arg-type]
    assert not direct.writable()
    cycle.transport = transport
    assert direct.writable()
    del cycle  # held weakly: a finished request's cycle is not kept alive by its scope's writer
    assert not direct.writable()


def test_a_requests_hold_writes_is_its_direct_writers_method_holding_the_cycle_weakly() -> None:
    """The request's HOLD_WRITES is a method of its DIRECT_WRITES (no partial call and weak reference of
    its own): given True it holds what the response writes, given False it sends it as one write, and
    once the cycle is gone it does nothing."""
    import types

    from duet.api.server._server import DirectBodyWrites, _HeldWrites

    class Cycle(types.SimpleNamespace):  # uvicorn's request-response cycle, as far as it is read (weakly referable)
        pass

    written: list[bytes] = []
    transport = types.SimpleNamespace(write=written.append, is_closing=lambda: False)
    cycle = Cycle(transport=transport)
    direct = DirectBodyWrites(cycle)
    direct.hold(True)
    assert isinstance(cycle.transport, _HeldWrites)
    cycle.transport.write(b"status")
    cycle.transport.write(b"first")
    assert written == []
    direct.hold(False)
    assert cycle.transport is transport and written == [b"statusfirst"]
    del cycle
    direct.hold(True)  # a finished request's cycle: nothing to hold, nothing raises


def test_the_edge_gives_every_request_one_asgi_entry_equal_to_uvicorns() -> None:
    """The scope's "asgi" entry is what uvicorn's own httptools protocol writes, and one dict for every
    request the edge's protocol serves (uvicorn makes one per request)."""
    import threading

    import httpx
    import uvicorn

    from duet.api.server._server import protocol_for
    from tests.conftest import free_port, wait_for_port

    def entries(http: Any) -> list[Any]:
        seen: list[Any] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            seen.append(scope["asgi"])
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off", http=http))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            wait_for_port(port)
            with httpx.Client(timeout=5) as client:  # one kept-alive connection, then a new one
                client.get(f"http://127.0.0.1:{port}/")
                client.get(f"http://127.0.0.1:{port}/")
            httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        finally:
            server.should_exit = True
            thread.join(10)
        return seen

    edge, stock = entries(protocol_for(ServiceOptions())), entries("httptools")
    assert len(edge) == len(stock) == 3 and edge == stock
    assert edge[0] is edge[1] is edge[2] and stock[0] is not stock[1]


def test_a_connection_holds_no_request_parser_while_its_response_streams() -> None:
    """Between two requests the edge's connection lets its request parser go (~820 bytes an open stream)
    and makes a new one for the next request: kept-alive and pipelined requests are read as uvicorn reads them."""
    import socket

    import httpx

    from duet.api._sse import CLIENT_GONE

    parser_held: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        parser_held.append(scope[CLIENT_GONE].__self__.parser is not None)  # the connection's protocol, as the response begins
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    with _edge_serving(app) as port:
        with httpx.Client(timeout=5) as client:  # one kept-alive connection
            assert [client.post(f"http://127.0.0.1:{port}/", content=b"x" * n).content for n in (1, 2, 3)] == [b"x", b"xx", b"xxx"]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # two requests in one write
            sock.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\none"
                         b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\ntwo")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.count(b"HTTP/1.1 200 OK") == 2 and answer.index(b"one") < answer.index(b"two")
    # The two sent at once are read by one parser, which the last keeps: it closes its connection (below).
    assert parser_held == [False] * 3 + [True, True]


def test_bytes_after_a_request_that_closes_its_connection_are_ignored_as_uvicorn_ignores_them() -> None:
    """After a request that ends its connection (``Connection: close``, HTTP/1.0), uvicorn's parser ignores
    whatever the client sends (``lenient_data_after_close``): its response streams on to its end, with no
    second status line in it, whether what follows is junk or another request."""
    import socket



    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in range(4):
            await send({"type": "http.response.body", "body": b"part %d\n" % part, "more_body": True})
            await asyncio.sleep(0.1)  # a stream under way when the client's next bytes arrive
        await send({"type": "http.response.body", "body": b"end\n"})

    with _edge_serving(app) as port:
        for version, close, then in ((b"1.1", b"Connection: close\r\n", b"garbage!!\r\n\r\n"),
                                     (b"1.1", b"Connection: close\r\n", b"GET /b HTTP/1.1\r\nHost: a\r\n\r\n"),
                                     (b"1.0", b"", b"garbage!!\r\n\r\n")):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b"POST / HTTP/" + version + b"\r\nHost: a\r\nContent-Length: 2\r\n" + close + b"\r\nhi")
                answer = sock.recv(65536)
                sock.sendall(then)
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.count(b" 200 OK") == 1 and b"400" not in answer and b"end\n" in answer, answer


@contextlib.contextmanager
def _edge_serving(app: Any) -> Iterator[int]:
    """``app`` served by uvicorn with Duet's edge protocol on a loopback port (yielded), in a thread of its own."""
    import threading

    import uvicorn

    from duet.api.server._server import protocol_for
    from tests.conftest import free_port, wait_for_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off",
                                           http=protocol_for(ServiceOptions())))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for_port(port)
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
