"""Connection pools and the transport tricks of the model client: what aiohttp is asked to do, and
what is done around it, so that a call costs no task per chunk, a cancelled call stops at once, and
nothing of a request outlives it in a pooled connection."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from typing import Any, Callable

import aiohttp
from autogen_core import CancellationToken
from multidict import CIMultiDict, CIMultiDictProxy  # aiohttp's own header types (its dependency)

from duet._small_deque import lighten_deque
from duet.agents._cancellation import still_wanted

END_OF_BODY_WAIT = 0.005
"""Seconds a finished stream's last bytes are waited for after ``[DONE]`` (they usually come with it)."""


class SharedPools:
    """The connection pools of unbounded clients (``max_connections=0``, the default), one per event
    loop and upstream (scheme, host, port). A pipeline's reasoning and answer clients on one server
    share one pool: the connection the reasoner's call frees carries the answer's call, so an open
    stream holds one upstream connection, not one per client (and one file descriptor fewer). A pool
    is closed when the last of its clients closes; a client with a bounded pool keeps its own."""

    def __init__(self) -> None:
        self._pools: dict[tuple[asyncio.AbstractEventLoop, str], tuple[aiohttp.TCPConnector, weakref.WeakSet[Any]]] = {}

    def acquire(self, loop: asyncio.AbstractEventLoop, origin: str, client: object) -> aiohttp.TCPConnector:
        for ended in [key for key in self._pools if key[0].is_closed()]:  # loops whose clients were never closed
            del self._pools[ended]
        pool = self._pools.get((loop, origin))
        if pool is None or pool[0].closed:
            pool = self._pools[(loop, origin)] = (Connector(limit=0, ttl_dns_cache=300), weakref.WeakSet())
        pool[1].add(client)
        return pool[0]

    async def release(self, loop: asyncio.AbstractEventLoop, origin: str, client: object) -> None:
        pool = self._pools.get((loop, origin))
        if pool is None:
            return
        pool[1].discard(client)
        if not pool[1]:
            del self._pools[(loop, origin)]
            await pool[0].close()


shared_pools = SharedPools()


class Connector(aiohttp.TCPConnector):
    """Opens each connection in a context of its own. A connection keeps the context it was opened
    in (its transport's callbacks run in it) for as long as it stays in the pool, and a request's
    context holds the whole request (its run, its team). Requests are sent from the caller's task:
    only a new connection costs a task."""

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        opening = asyncio.get_running_loop().create_task(super()._create_connection(req, traces, timeout),
                                                         context=contextvars.Context())
        try:
            return await opening
        except BaseException:
            opening.add_done_callback(_close_unclaimed)  # cancelled as it opened: nobody else will close it
            raise


def _close_unclaimed(opening: asyncio.Task[Any]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class LightResponse(aiohttp.ClientResponse):
    """The model client's responses (``ClientSession(response_class=...)``): once the status line and
    headers are read, the response lets go of what the client never reads again and aiohttp only reads
    for ``raise_for_status`` and its errors: the headers as raw bytes (the parsed ``headers`` stay) and
    the request's headers in ``request_info`` (its URL and method stay). ~800 bytes less for as long as
    a stream lasts (more from an upstream that sends many headers), and no request header (a key) is
    held by a response."""

    async def start(self, connection: Any) -> aiohttp.ClientResponse:
        response = await super().start(connection)
        self._raw_headers = ()
        sent = self._request_info
        self._request_info = aiohttp.RequestInfo(sent.url, sent.method, _NO_HEADERS, sent.real_url)
        return response


class SentBody(aiohttp.BytesPayload):
    """A request's body that is written only if ``cancellation_token`` is still wanted (its caller
    may have gone since the call began, while the connection was found), and tells ``sent`` once it
    has been written to the connection."""

    def __init__(self, body: bytes, sent: Callable[[], None] | None, cancellation_token: CancellationToken | None) -> None:
        super().__init__(body)
        self._sent = sent
        self._token = cancellation_token

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        # The last moment before the upstream sees a request (its head goes out with the body): a
        # client gone by now costs no model call. aiohttp closes the connection, nothing written.
        if not still_wanted(self._token):
            raise asyncio.CancelledError()
        await super().write_with_length(writer, content_length)
        if self._sent is not None:
            self._sent()


class Canceller:
    """What a cancelled token calls to stop the request its task is sending; remembers that it did."""

    __slots__ = ("task", "fired")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


class ReadCancelled(asyncio.CancelledError):
    """Raised into a read that the request's cancellation stopped.

    Closing an aiohttp response wakes a waiting read with one module-level exception object
    (``aiohttp.client_reqrep._CONNECTION_CLOSED_EXCEPTION``); every raise of it appends the
    reader's frames to its traceback, and those frames hold the request (its team, runtime and
    messages) for ever. So a cancelled read gets an exception of its own, made for this request,
    before the response is closed: nothing of the request outlives it.
    """


def abort_read(reference: weakref.ref[aiohttp.ClientResponse]) -> None:
    """The cancellation callback of an open response: stops a pending read at once and drops the
    connection, so the upstream stops generating. Holds the response weakly: the token outlives it
    (a run's token, the reasoner's response), and a response nobody reads any more needs no abort."""
    response = reference()
    if response is None:
        return
    if response.content.exception() is None:
        response.content.set_exception(ReadCancelled())
    response.close()


def hold_reading(response: aiohttp.ClientResponse) -> Any:
    """Stops reading ``response``'s connection until :func:`release_reading`; returns what to give
    it: ``None`` when there is nothing to hold (no connection, or aiohttp's own flow control holds it
    already). A stream's first token goes on alone, and the caller's writer gets a turn to send it
    before more is read: the socket is not even read until the caller asks for more and that turn has
    passed (the loop would otherwise receive and parse what arrived before the writer's turn).

    The transport is paused, not aiohttp's protocol: the protocol's pause would also stop its parser
    after the next HTTP chunk once reading resumes. Held for one hand-off only, so aiohttp's read
    timeout keeps running meanwhile."""
    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    if protocol is None:
        return None
    transport = protocol.transport
    if transport is None or protocol._reading_paused or not transport.is_reading():
        return None
    transport.pause_reading()
    return protocol


def release_reading(protocol: Any) -> None:
    """Reads the connection :func:`hold_reading` held again (unless it held none, aiohttp's flow
    control now holds it, or the connection is gone)."""
    if protocol is None:
        return
    transport = protocol.transport
    if transport is not None and not transport.is_closing() and not protocol._reading_paused:
        # In no context: with asyncio's own loop, reading again captures the context for as long as the
        # connection lives (in the pool, after this request). (aiohttp's own flow control resumes a
        # long answer's reading in the reader's context; uvloop, what the server runs, captures none.)
        contextvars.Context().run(transport.resume_reading)


async def finish_body(response: aiohttp.ClientResponse) -> None:
    """Waits briefly for the last bytes of a body whose stream has ended (a chunked body's terminator
    follows ``[DONE]``): a body read to its end returns its connection to the pool, one cut short closes it."""
    if not response.content.is_eof():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(response.content.wait_eof(), END_OF_BODY_WAIT)


_EVENT_STREAM = frozenset({"text/event-stream", "text/event-stream; charset=utf-8"})


def media_type(response: aiohttp.ClientResponse) -> str:
    """``response.content_type`` (lower case, no parameters), without the dict of the header's
    parameters aiohttp parses and keeps on the response (~1.5 KB) for it."""
    header = response.headers.get("Content-Type") or ""
    if header in _EVENT_STREAM:  # what streamed answers say (no parsing for them)
        return "text/event-stream"
    media_type = header.split(";", 1)[0].strip().lower()
    return media_type if media_type.count("/") == 1 else "application/octet-stream"  # aiohttp's default


def lighten(response: aiohttp.ClientResponse) -> None:
    """aiohttp keeps a connection's parsed responses in a deque, which holds one for as long as the
    stream lasts (~750 bytes): a small one instead. The response's body chunks and their offsets stay
    in deques: a client that stops reading lets thousands of chunks pile up there (up to aiohttp's read
    limit), and a list would take them out one ``pop(0)`` at a time, quadratically."""
    if response.connection is not None:
        lighten_deque(response.connection.protocol, "_buffer", only_empty=True)


def forget(exc: BaseException) -> None:
    """Drops the frames a caught aiohttp exception collected: it may be an object aiohttp shares
    between requests, whose traceback would otherwise keep this request alive."""
    exc.__traceback__ = None
    exc.__context__ = None


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of a response body, and whether the body was longer."""
    chunks: list[bytes] = []
    size = 0
    async for data in response.content.iter_any():
        chunks.append(data)
        size += len(data)
        if size > limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False
