"""The HTTP server: uvicorn with the edge's limits and a graceful shutdown.

uvicorn 0.54 bounds none of these on its httptools protocol: a request head may grow without end
(and httptools joins a header value piece by piece, so a 64 MB header costs seconds of event-loop
time and stalls every client), a connection may take forever to send it, the number of open
connections is unbounded, a request body left unread after the response may trickle in forever,
and SIGTERM waits for streams without end. :class:`EdgeProtocol` and :class:`EdgeServer` add each
bound; uvicorn's ``limit_concurrency`` is not used (it answers 503 per request but never closes a
connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import select
import socket
import time
import weakref
from typing import Any, Callable, Protocol

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from duet._small_deque import SmallDeque, lighten_deque

from duet.api.server._process import freeze_startup_objects
from duet.api._wire import ErrorBody, ErrorDetail
from duet.api._settings import ServiceOptions
from duet.api._sse import ABORT_CONNECTION, CLIENT_GONE, DIRECT_WRITES, HOLD_WRITES, WATCH_DISCONNECT

logger = logging.getLogger("duet")

ABORT_GRACE_SECONDS = 2.0  # after the drain time: for the error events to go out before connections close
LIFESPAN_SHUTDOWN_SECONDS = 10.0  # closing model clients, MCP servers and the store


def _head_too_large(max_bytes: int) -> bytes:
    detail = ErrorDetail(message=f"the request head (request line and headers) is larger than {max_bytes} bytes",
                         type="invalid_request_error", code="request_header_too_large")
    body = json.dumps(ErrorBody(error=detail).model_dump()).encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))


_HUNG_UP = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR  # POLLRDHUP (Linux): the peer sent its FIN


def peer_hung_up(fd: int) -> bool:
    """Whether the peer of the connected socket ``fd`` has closed its side or reset the connection,
    asked of the kernel now (one ``poll``, no read): what the event loop would learn in its next turn.
    Data waiting to be read (a pipelined request) is no hang-up. Without ``POLLRDHUP`` (not Linux)
    only a reset is seen."""
    poller = select.poll()
    poller.register(fd, _HUNG_UP)
    return bool(poller.poll(0))


class _HeldWrites:
    """A response's transport while its writes are held (:func:`hold_writes`): what uvicorn writes is
    kept, and goes out as one write when released (or before the connection is closed)."""

    __slots__ = ("transport", "held")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.held: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.held.append(data)

    def release(self) -> asyncio.Transport:
        held, self.held = self.held, []
        if held and not self.transport.is_closing():  # a client that hung up gets nothing
            self.transport.write(b"".join(held))
        return self.transport

    def close(self) -> None:
        self.release().close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...: the transport's own
        return getattr(self.transport, name)


def hold_writes(cycle: Any, hold: bool) -> None:
    """Holds back (True) or sends (False) what a response writes (:data:`~duet.api._sse.HOLD_WRITES`;
    ``cycle`` is uvicorn's request-response cycle, which writes to its ``transport``). Held in this
    process, not in the kernel: the status line and the first chunk leave in one write, with no system
    call to hold or release them."""
    transport = cycle.transport
    if hold:
        if not isinstance(transport, _HeldWrites):
            cycle.transport = _HeldWrites(transport)
    elif isinstance(transport, _HeldWrites):
        cycle.transport = transport.release()


class DirectBodyWrites:
    """A response's streamed body written in the caller's step (:class:`~duet.api._sse.DirectWrites`):
    what uvicorn's ``send`` does for a chunk of a chunked body, without the coroutine, for as long as
    its transport takes writes without waiting (``send`` then waits for the client, as ever). Holds the
    request's cycle weakly; :meth:`hold` is the request's :data:`~duet.api._sse.HOLD_WRITES`."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: Any) -> None:
        self._cycle = weakref.ref(cycle)

    def writable(self) -> bool:
        cycle = self._cycle()
        return (cycle is not None and cycle.chunked_encoding is True and cycle.response_started and not cycle.response_complete
                and not cycle.disconnected and not cycle.flow.write_paused and not isinstance(cycle.transport, _HeldWrites))

    def write(self, data: bytes) -> None:
        self._cycle().transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # type: ignore[union-attr]  # writable() saw it

    def startable(self) -> bool:
        cycle = self._cycle()
        return (cycle is not None and not cycle.response_started and not cycle.disconnected and not cycle.flow.write_paused
                and not isinstance(cycle.transport, _HeldWrites))

    def hold(self, hold: bool) -> None:
        """:func:`hold_writes` for the request's cycle while it lives (its :data:`~duet.api._sse.HOLD_WRITES`:
        a method of this object, which holds the cycle weakly already, not a partial call and a weak
        reference more, ~230 bytes, for every request)."""
        cycle = self._cycle()
        if cycle is not None:
            hold_writes(cycle, hold)


class _EdgeState:
    """What :class:`EdgeProtocol` adds to uvicorn's protocol, in one attribute: uvicorn's protocol sets
    28 attributes, and an object with more than 29 gets a dict of its own instead of its class's shared
    keys (CPython 3.11: ~1.3 KB more for every open connection)."""

    __slots__ = ("head_budget", "heads_read", "head_timer", "head_since", "head_begun", "unread_body_timer", "disconnect_watchers",
                 "fd", "message_read")

    def __init__(self) -> None:
        self.head_budget = -1  # bytes the current request head may still take; -1 while no head is read
        self.heads_read = 0
        self.head_timer: asyncio.TimerHandle | None = None  # set while a head is awaited (beyond the read it began in)
        self.head_since = 0.0
        self.head_begun = False  # a kept-alive connection's next head began and is not complete
        self.unread_body_timer: asyncio.TimerHandle | None = None
        # Of the running request (WATCH_DISCONNECT): each future, and what to call before it is set.
        self.disconnect_watchers: list[tuple[asyncio.Future[None], Callable[[], object] | None]] | None = None
        self.fd = -1  # the connection's socket (CLIENT_GONE); -1: none to ask
        self.message_read = False  # the last request was read whole on a connection that goes on, and no next one has begun


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded, timed request head, a connection cap, and a
    time limit on skipping a body nobody will use."""

    options: ServiceOptions = ServiceOptions()  # set per server by :func:`protocol_for`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._edge = _EdgeState()  # one attribute: see _EdgeState
        # uvicorn's queue of pipelined requests, and below its events' waiters: deques of ~750 bytes
        # each for an item or two, on every connection and request.
        self.pipeline = SmallDeque()  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.options.max_connections and not self._evict_slowest_head():
            self.transport = transport
            transport.close()  # at the cap, every connection busy with a request: refuse at once
            return
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._edge.fd = sock.fileno()
        lighten_deque(self.flow._is_writable_event, "_waiters", only_empty=True)
        self._edge.head_budget = self.options.max_header_bytes
        self._start_head_timer()  # a connection that never sends a full head is closed too

    def _evict_slowest_head(self) -> bool:
        """Closes the connection that has waited longest for its request head (a slow or silent
        client: a working one sends its head at once), else an idle kept-alive one, so a flood of
        either cannot keep new clients out. False if every connection is busy with a request."""
        edge = [c for c in self.connections if isinstance(c, EdgeProtocol)]
        waiting = [c for c in edge if c._edge.head_timer is not None]
        if waiting:
            victim = min(waiting, key=lambda connection: connection._edge.head_since)
        else:
            victim = next((c for c in edge if c.timeout_keep_alive_task is not None), None)  # type: ignore[assignment]
            if victim is None:
                return False
        self.connections.discard(victim)
        victim.transport.close()
        return True

    def eof_received(self) -> None:
        # The client closed its side: uvicorn closes the connection, whose loss is told a turn of the
        # loop later; the request's watchers are told now, before any other task runs.
        self._tell_gone()
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._tell_gone()
        self._cancel_head_timer()
        self._cancel_unread_body_timer()
        if self.flow is None:  # closed at the cap in connection_made: uvicorn never saw it
            return
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.parser is None:  # let go between two requests (below): the next one begins here
            self.parser = _request_parser(self)
        self._read(data)
        parser = self.parser
        if self._edge.message_read and parser is not None and not parser.should_upgrade():
            # Between two requests the parser holds no state worth keeping (a new one parses the next
            # as this one would), but ~820 bytes (llhttp's state, a bound method per callback): not
            # kept for as long as the response streams, or the connection idles. A request that ends
            # its connection (Connection: close, HTTP/1.0) or upgrades it keeps its parser, which
            # ignores or refuses what follows as uvicorn's does (lenient_data_after_close).
            self.parser = None  # type: ignore[assignment]

    def _read(self, data: bytes) -> None:
        """uvicorn's ``data_received``, with the head's budget and timer."""
        budget = self._edge.head_budget
        if budget >= 0 and len(data) > budget:
            # Feed only what the head may still take: if it does not complete within that, it is too large.
            heads_read = self._edge.heads_read
            super().data_received(data[:budget])
            if self.transport.is_closing():
                return
            if self._edge.heads_read == heads_read:
                self._cancel_head_timer()
                self.transport.write(_head_too_large(self.options.max_header_bytes))
                self.transport.close()
                return
            data = data[budget:]
        elif budget >= 0:
            self._edge.head_budget = budget - len(data)
        super().data_received(data)
        edge = self._edge
        if edge.head_timer is None:
            if edge.head_begun:  # the head goes on in later reads: timed from its first byte
                left = self.options.header_timeout - (time.monotonic() - edge.head_since)
                edge.head_timer = self.loop.call_later(left, self._head_timed_out)
            elif self.timeout_keep_alive_task is None and self._idle():
                # Bytes that began no head (blank lines, which the parser skips) ended uvicorn's
                # keep-alive wait: the connection waits for a head, timed like one.
                self._start_head_timer()

    def _idle(self) -> bool:
        """No request is running or waiting on this connection, and none is being read."""
        cycle = self.cycle
        return (cycle is None or (cycle.response_complete and not cycle.more_body)) and not self.pipeline

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._edge.message_read = False
        # uvicorn makes the scope's "asgi" dict anew for every request (~180 bytes, for as long as it
        # runs); its two versions are the server's: one dict, which nothing writes to, serves them all.
        self.scope["asgi"] = _asgi_versions(self.asgi_version)
        edge = self._edge
        if edge.head_timer is None:
            # A new request on a kept-alive connection: its head is timed from here, but the timer is
            # made only if the head outlasts this read (data_received), as a head nearly never does.
            edge.head_since = time.monotonic()
            edge.head_begun = True

    def on_headers_complete(self) -> None:
        edge = self._edge
        edge.head_budget = -1
        edge.heads_read += 1
        edge.head_begun = False
        if edge.head_timer is not None:
            self._cancel_head_timer()
        self.scope[ABORT_CONNECTION] = self.transport.abort  # type: ignore[typeddict-unknown-key]
        self.scope[WATCH_DISCONNECT] = self._watch_disconnect  # type: ignore[typeddict-unknown-key]
        self.scope[CLIENT_GONE] = self._client_gone  # type: ignore[typeddict-unknown-key]
        super().on_headers_complete()
        if self.cycle is not None:
            lighten_deque(self.cycle.message_event, "_waiters", only_empty=True)
            # The request's own cycle (a pipelined request behind it gets a cycle and a scope of its own),
            # held weakly: the cycle holds the scope, and a cycle of references would wait for the collector.
            direct = DirectBodyWrites(self.cycle)
            self.scope[HOLD_WRITES] = direct.hold  # type: ignore[typeddict-unknown-key]
            self.scope[DIRECT_WRITES] = direct  # type: ignore[typeddict-unknown-key]

    def _watch_disconnect(self, gone: asyncio.Future[None], then: Callable[[], object] | None = None) -> None:
        """Calls ``then``, then sets ``gone``'s result, when the client hangs up or the response is
        complete (:data:`WATCH_DISCONNECT`): what uvicorn's ``receive`` tells a task waiting in it,
        without the task, and in the step in which the hang-up is read. A hang-up that has reached the
        kernel but not been read yet (a busy server reads a connection's request before its end) counts
        at once. One request at a time runs on a connection (pipelined ones wait for it)."""
        cycle = self.cycle
        if cycle is None or cycle.disconnected or cycle.response_complete or self._peer_gone():
            _tell(gone, then)
            return
        if self._edge.disconnect_watchers is None:
            self._edge.disconnect_watchers = []
        self._edge.disconnect_watchers.append((gone, then))
        self.flow.resume_reading()  # as receive does: a hang-up is seen only while the connection is read

    def _peer_gone(self) -> bool:
        """The connection is closing, or its client has closed or reset it (asked of the kernel)."""
        if self.transport.is_closing():
            return True
        return self._edge.fd >= 0 and peer_hung_up(self._edge.fd)

    def _client_gone(self) -> bool:
        """:data:`CLIENT_GONE`: whether the client has gone, asking the kernel; if it has, the request's
        watchers are told now."""
        cycle = self.cycle
        if (cycle is not None and cycle.disconnected) or self._peer_gone():
            self._tell_gone()
            return True
        return False

    def _tell_gone(self) -> None:
        watchers, self._edge.disconnect_watchers = self._edge.disconnect_watchers, None
        for gone, then in watchers or ():
            if not gone.done():  # a cancelled one stopped watching
                _tell(gone, then)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # Read whole; the parser may go only if the connection goes on (asked here: llhttp clears what it
        # knows of the request once this callback returns).
        self._edge.message_read = self.parser.should_keep_alive()
        self._cancel_unread_body_timer()
        self._edge.head_budget = self.options.max_header_bytes  # what follows is the next request's head

    def on_response_complete(self) -> None:
        self._tell_gone()
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and cycle.more_body:
            # Answered before its body arrived (a refusal): the parser skips the rest of the body
            # (kept-alive clients may reuse the connection after it), for no longer than a body may take.
            self._cancel_unread_body_timer()
            self._edge.unread_body_timer = self.loop.call_later(self.options.body_timeout, self._close)
        super().on_response_complete()

    def _start_head_timer(self) -> None:
        self._cancel_head_timer()
        self._edge.head_since = time.monotonic()  # finer than the loop clock: orders connections accepted together
        self._edge.head_timer = self.loop.call_later(self.options.header_timeout, self._head_timed_out)

    def _cancel_unread_body_timer(self) -> None:
        if self._edge.unread_body_timer is not None:
            self._edge.unread_body_timer.cancel()
            self._edge.unread_body_timer = None

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _cancel_head_timer(self) -> None:
        if self._edge.head_timer is not None:
            self._edge.head_timer.cancel()
            self._edge.head_timer = None

    def _head_timed_out(self) -> None:
        self._edge.head_timer = None
        self._close()


def _request_parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    """A request parser for ``protocol``. Mirrors the parser HttpToolsProtocol.__init__ of uvicorn 0.54 (pinned) makes."""
    parser = httptools.HttpRequestParser(protocol)
    with contextlib.suppress(AttributeError):  # httptools < 0.6.3 (uvicorn's own guard)
        parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


_ASGI_VERSIONS: dict[str, Any] = {}  # by the server's ASGI version: uvicorn's two (3.0, 2.0)


def _asgi_versions(version: str) -> Any:
    """The scope's ``"asgi"`` entry as uvicorn's httptools protocol writes it (0.54: the server's ASGI
    version, HTTP spec 2.3), one for all the requests of a version."""
    versions = _ASGI_VERSIONS.get(version)
    if versions is None:
        versions = _ASGI_VERSIONS.setdefault(version, {"version": version, "spec_version": "2.3"})
    return versions


def _tell(gone: asyncio.Future[None], then: Callable[[], object] | None) -> None:
    """Tells a disconnect watcher: ``then`` first (it cancels the request's run), then the future."""
    if then is not None:
        try:
            then()
        except Exception:  # in the server's own callback: logged, never raised into the protocol
            logger.exception("a disconnect callback failed")
    gone.set_result(None)


def protocol_for(options: ServiceOptions) -> type[EdgeProtocol]:
    return type("EdgeProtocol", (EdgeProtocol,), {"options": options})


class Drainable(Protocol):
    """What the server tells the app on shutdown (:class:`duet.api._limits.RequestGate`)."""

    def drain(self) -> None: ...

    def stop(self) -> None: ...


class EdgeServer(uvicorn.Server):
    """uvicorn's server with a bounded graceful shutdown: on SIGTERM or SIGINT it stops accepting,
    lets running requests finish for ``shutdown_timeout`` seconds, then has the app end the rest
    (streams with one error event, others with 503) and exits."""

    def __init__(self, config: uvicorn.Config, options: ServiceOptions, gate: Drainable,
                 on_started: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.options = options
        self.gate = gate
        self.on_started = on_started

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:  # the lifespan has run: what it opened (MCP sessions, the service) lives as long as the process
            freeze_startup_objects()
            if self.on_started is not None:
                self.on_started()

    async def shutdown(self, sockets: Any = None) -> None:
        logger.info("shutting down: draining for up to %g s", self.options.shutdown_timeout)
        for server in self.servers:
            server.close()  # new connections are refused from here
        for sock in sockets or []:
            sock.close()
        self.gate.drain()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # idle connections close now, busy ones after their response
        if not await self._until_idle(self.options.shutdown_timeout):
            logger.warning("shutting down: ending %d running request(s)", len(self.server_state.tasks))
            self.gate.stop()
            if not await self._until_idle(ABORT_GRACE_SECONDS):
                for task in self.server_state.tasks:
                    task.cancel()
                for connection in list(self.server_state.connections):
                    connection.transport.close()
        if not self.force_exit:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.lifespan.shutdown(), LIFESPAN_SHUTDOWN_SECONDS)

    async def _until_idle(self, timeout: float) -> bool:
        """Whether every request task and connection ended within ``timeout`` (or a second signal came)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        state = self.server_state
        # uvicorn's server state has no event to wait on (uvicorn polls it too).
        while (state.tasks or state.connections) and not self.force_exit and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return not (state.tasks or state.connections)


FILES_BESIDES_CONNECTIONS = 128  # MCP servers, the store, logs, idle upstream connections


def connections_that_fit(options: ServiceOptions, files: int) -> int:
    """The most client connections the open-file limit ``files`` leaves room for: each running
    completion holds an upstream connection beside its client's (up to ``max_concurrent_requests``,
    or half of what is left when the limit is too small for both), and a few files are the process's own."""
    usable = max(files - FILES_BESIDES_CONNECTIONS, 2)
    upstream = min(options.max_concurrent_requests, usable // 2)
    return max(usable - upstream, 1)


def raise_open_file_limit() -> int:
    """Each connection is a file: takes the hard limit the system allows, not the default soft
    one. Returns the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def serve(app: Any, options: ServiceOptions, gate: Drainable, *, host: str, port: int, log_level: str,
          sockets: list[socket.socket] | None = None, on_started: Callable[[], None] | None = None) -> None:
    """Runs ``app`` until SIGTERM/SIGINT, with the edge's limits: on ``host``:``port``, or on
    ``sockets`` already listening (a worker of :mod:`duet.api.server._workers`). ``on_started`` is called
    once the app has started and serves."""
    files = raise_open_file_limit()
    if files != resource.RLIM_INFINITY and options.max_connections > (fitting := connections_that_fit(options, files)):
        logger.warning("max_connections %d does not fit the open-file limit %d (with an upstream connection for each of "
                       "max_concurrent_requests %d): using %d", options.max_connections, files, options.max_concurrent_requests, fitting)
        options = options.model_copy(update={"max_connections": fitting})
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol_for(options),
        timeout_keep_alive=options.keep_alive_timeout,  # type: ignore[arg-type]  # a float works (call_later)
        access_log=False,  # each request's line is Duet's own (duet.api.observability), without the query string
        server_header=False,  # "server: uvicorn" on every response tells a client nothing, and a scanner what runs here
        log_config=None,  # uvicorn's lines go through the process's handler, in its format (duet.api.observability._logs)
    )
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises SIGINT again once it has shut down
        EdgeServer(config, options, gate, on_started).run(sockets)
