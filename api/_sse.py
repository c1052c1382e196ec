"""A streaming response that notices at once when the client goes away, keeps quiet connections
alive, and can still answer with a proper error status if the stream fails before it starts.

Starlette's ``StreamingResponse`` on ASGI 2.4 servers learns of a disconnect only when a write
fails, which during a long silent stretch (a model still thinking) can be minutes later. Here a
watcher waits for ``http.disconnect`` and cancels the stream's writing, whose source then cancels the duet's
model calls. A heartbeat writes the protocol's keep-alive (OpenAI's ``: ping``) when nothing was sent for ``ping_interval``, and stops a
stream whose client has not taken a write for ``write_timeout`` (a client that stopped reading):
the source is closed as for a hang-up, so the duet's model calls stop too. When the server's drain
time is over (``stopped``), the stream ends with one error event (or, before its first byte, a 503).
"""

from __future__ import annotations

import asyncio
import logging
import math
from contextvars import ContextVar
from typing import Any, AsyncIterator, Awaitable, Callable, Final, Protocol

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from duet.api._errors import APIError
from duet.api._limits import shutting_down

PING = b": ping\n\n"
"""An SSE comment: what a quiet stream is sent to keep it alive (every protocol but Messages, which names its pings)."""

logger = logging.getLogger(__name__)

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies not to buffer the stream
]

SHUTDOWN_WRITE_TIMEOUT = 1.0  # seconds the last error event may take to write when the server stops
WRITE_PIECE = 64 * 1024  # a collected body is written in pieces of this size (the transport's high-water mark)


class EventSource(Protocol):
    """What an :class:`EventStreamResponse` streams, in its protocol's framing."""

    keep_alive: bytes
    """Written when the stream was quiet for ``ping_interval``."""

    async def start(self) -> Response | None:
        """Waits for the stream to begin. Returns a response to send *instead* (an error that
        happened before the first byte), or ``None`` to stream :meth:`chunks`."""

    def chunks(self, direct: "DirectWrites | None" = None) -> AsyncIterator[bytes]:
        """Framed SSE bytes. ``direct``, when given: what the source may also write itself, between two
        chunks, as soon as it has it (:class:`DirectWrites`)."""

    def error_response(self, error: APIError, headers: dict[str, str] | None = None) -> Response:
        """``error`` as the protocol's HTTP error response (the stream has not begun)."""

    def error_event(self, error: APIError) -> bytes:
        """The stream's last bytes: ``error`` as the protocol's error event."""

    async def close(self) -> None:
        """Called exactly once, however the response ends."""


_abandoned = ContextVar("duet_abandoned_response", default=False)

ABORT_CONNECTION: Final = "duet.abort_connection"
"""Scope key of a callable that drops the connection and whatever is still buffered for it (set by
the edge server, :mod:`duet.api.server._server`): closing it would wait for a client that reads nothing."""


HOLD_WRITES: Final = "duet.hold_writes"
"""Scope key of a callable that, given True, makes the response hold back what it writes until it
is given False (set by the edge server, :mod:`duet.api.server._server`): the status line and the first
events go out as one write and one packet, which the client reads at once, instead of two it wakes
for one after the other. Hold only across writes that follow one another at once."""


WATCH_DISCONNECT: Final = "duet.watch_disconnect"
"""Scope key of a callable that, given a future and a callback (or ``None``), calls the callback and
then sets the future's result when the client has gone or the response is complete (set by the edge
server, :mod:`duet.api.server._server`): a disconnect watcher that costs no task, and no coroutines waiting
in ``receive``, for as long as the response lasts. The callback runs in the same step as the server
learns of the hang-up, before any other task does."""

CLIENT_GONE: Final = "duet.client_gone"
"""Scope key of a callable that tells whether the client has closed or reset its connection, asking
the kernel at once (set by the edge server, :mod:`duet.api.server._server`): a hang-up that has arrived is
seen before the event loop gets round to reading it, which on a busy server is a while."""


DIRECT_WRITES: Final = "duet.direct_writes"
"""Scope key of a :class:`DirectWrites` for the response's body (set by the edge server,
:mod:`duet.api.server._server`)."""


class DirectWrites(Protocol):
    """A started streamed body written in the caller's own step, not through ASGI's ``send``: a token
    an agent has just read goes to the client without waking the response's task (one pass of the
    event loop less per token). Only while :meth:`writable`; otherwise the usual ``send``, which waits
    for a client that is slow to read."""

    def writable(self) -> bool:
        """Whether :meth:`write` may be called now: the body has begun, is not complete, the client is
        there and the transport takes more without waiting."""

    def write(self, data: bytes) -> None:
        """Writes ``data`` as the body's next bytes (call only just after :meth:`writable` said yes)."""

    def startable(self) -> bool:
        """Whether the response's status line may be sent now without waiting: not sent yet, the client
        is there and the transport takes more without waiting (ASGI's ``send`` then returns at once)."""


class QuietAbandonedResponses(logging.Filter):
    """For ``uvicorn.error`` (installed by :func:`duet.api.server._process.configure_process`): a response
    given up after ``write_timeout`` ends without completing (the client reads nothing, so no end
    can be written), which uvicorn reports at ERROR. Duet has already logged a warning for it; the
    filter runs in the request's own task, where ``_abandoned`` is set."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_abandoned.get() and record.msg == "ASGI callable returned without completing response.")


def abandon_response(scope: Scope) -> None:
    """Gives up a response its client does not take: drops the connection (with what is buffered
    for it) and keeps uvicorn quiet about the response left incomplete. Call it in the request's task."""
    _abandoned.set(True)
    abort = scope.get(ABORT_CONNECTION)
    if abort is not None:
        abort()


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancels ``tasks`` and waits for them to end, ignoring how they end. A cancellation of the
    calling task itself (the server ending every request) is passed on, not swallowed with theirs."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        try:
            await task
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
        except Exception:  # noqa: BLE001 - an error of the task was reported where it mattered
            pass


async def write_with_timeout(scope: Scope, send: Send, response: Response, write_timeout: float) -> None:
    """Sends ``response`` (a complete body, such as a ``JSONResponse``) in pieces, each of which the
    client must take within ``write_timeout``; a client that stops reading loses its connection
    (uvicorn buffers a body without bound and waits for it without a timeout). A body of one piece,
    the usual case, costs no more sends than before."""
    body = response.body
    last = (len(body) - 1) // WRITE_PIECE * WRITE_PIECE if body else 0  # where the final piece begins
    try:
        async with asyncio.timeout(write_timeout):
            await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
        for start in range(0, last, WRITE_PIECE):
            async with asyncio.timeout(write_timeout):  # uvicorn waits for its buffer to drain before each send
                await send({"type": "http.response.body", "body": body[start : start + WRITE_PIECE], "more_body": True})
        async with asyncio.timeout(write_timeout):
            await send({"type": "http.response.body", "body": body[last:], "more_body": False})
    except TimeoutError:
        logger.warning("stopped a response: its client took no data for %gs (write_timeout)", write_timeout)
        abandon_response(scope)


class TimedWriteResponse(Response):
    """A complete response (``wrapped``) written with :func:`write_with_timeout`."""

    def __init__(self, wrapped: Response, write_timeout: float) -> None:
        self._wrapped = wrapped
        self._write_timeout = write_timeout
        self.status_code = wrapped.status_code
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await write_with_timeout(scope, send, self._wrapped, self._write_timeout)


def watch_disconnect(scope: Scope, receive: Receive, then: Callable[[], object] | None = None) -> asyncio.Future[None]:
    """A future done when the client has gone (or the response is complete); ``then`` is called
    first, so whoever wakes for the future finds what it cancels cancelled (with the edge server's
    hook, at once: in the step in which the server learns of the hang-up). Cancel the future to stop
    watching. The edge server's hook (:data:`WATCH_DISCONNECT`) when there is one; on any other
    ASGI server, a task reading ``receive`` (:func:`wait_for_disconnect`)."""
    watch = scope.get(WATCH_DISCONNECT)
    if watch is None:
        return asyncio.ensure_future(wait_for_disconnect(receive, then))
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    watch(gone, then)  # ``then`` is called as the server learns of the hang-up, not a turn of the loop later
    return gone


async def wait_for_disconnect(receive: Receive, then: Callable[[], object] | None = None) -> None:
    """Returns when the client has gone (or the response is complete); calls ``then`` at once,
    in the same step, so what it cancels is cancelled without another turn of the loop."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if then is not None:
        then()


_GONE, _STOPPED, _TOO_LATE = object(), object(), object()  # why a stream's writing was interrupted


class EventStreamResponse(Response):
    """Streams an :class:`EventSource` as ``text/event-stream``.

    The endpoint returns this at once; the status line is sent with the source's first chunk, made
    from its first events (held back until then, so a run that fails at once gets a real status)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        source: EventSource,
        *,
        ping_interval: float,
        write_timeout: float = 30.0,
        disconnected: asyncio.Future[None] | None = None,
        stopped: asyncio.Future[None] | None = None,
    ) -> None:
        """``disconnected``: a :func:`watch_disconnect` future already watching (started before the
        run, so a client gone early never costs a model call); ``stopped``: done when the server
        ends every running request."""
        self.status_code = 200
        self.background = None
        self._source = source
        self._ping_interval = ping_interval
        self._write_timeout = write_timeout
        self._disconnected = disconnected
        self._stopped = stopped
        self._last_write = 0.0  # when the last write (or ping) began; what the heartbeat measures from
        self._started = False  # the status line went out
        self._writing = False  # a write waits for the client to take it
        self._finished = False
        self._answering_instead = False
        self.write_timed_out = False
        self._direct: DirectWrites | None = None  # the edge server's, once the status line is out
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None  # the request's, while it writes the stream
        self._running = False  # the stream is being written (and may be interrupted)
        self._interrupted: object = None  # why its writing was cancelled: _GONE, _STOPPED, _TOO_LATE
        self._late: asyncio.TimerHandle | None = None  # the end of an error response's time to finish at a stop
        self._begun_by: tuple[Scope, Send, DirectWrites] | None = None  # while the source may begin the stream (begin)

    @property
    def started(self) -> bool:
        """The status line is out (the source may have begun the stream itself, :meth:`begin`)."""
        return self._started

    def startable(self) -> bool:
        """Whether the source may :meth:`begin` the stream now, in its own step: it waits for its first
        events, the edge server writes directly, and the client's connection takes the status line at once."""
        begun_by = self._begun_by
        return begun_by is not None and not self._started and begun_by[2].startable()

    def begin(self, data: bytes) -> bytes:
        """Sends the status line and ``data`` (the stream's first bytes) now, in the caller's step (call
        only just after :meth:`startable` said yes): the first token an agent reads goes to the client
        without waking the response's task (one pass of the event loop less; on a busy worker each pass is
        long). Through ASGI's ``send`` (the request's id header, its status for the log), which returns at
        once on a connection that takes writes; as one write, as the response's own first chunk goes.

        Returns what of ``data`` it did not send: all of it when a ``send`` would have waited (a
        middleware of the app's that hands messages to a task of its own, as Starlette's
        ``BaseHTTPMiddleware`` does): the stream's task then sends them (and the status line, unless it
        went out), as ever, and the stream is begun this way no more."""
        scope, send, _ = self._begun_by  # type: ignore[misc]  # startable() saw it
        hold_writes: Callable[[bool], None] | None = scope.get(HOLD_WRITES) if data else None
        if hold_writes is not None:
            hold_writes(True)
        try:
            if not _at_once(send({"type": "http.response.start", "status": 200, "headers": _HEADERS})):
                self._begun_by = None
                return data
            self._started = True
            if data and not _at_once(send({"type": "http.response.body", "body": data, "more_body": True})):
                self._begun_by = None
                return data
        finally:
            if hold_writes is not None:
                hold_writes(False)
        self._last_write = asyncio.get_running_loop().time()
        return b""

    def writable(self) -> bool:
        """:class:`DirectWrites` for the source: the edge server's, while no ``send`` is under way."""
        direct = self._direct
        return direct is not None and not self._writing and direct.writable()

    def write(self, data: bytes) -> None:
        self._last_write = self._loop.time()  # type: ignore[union-attr]  # set with _direct
        self._direct.write(data)  # type: ignore[union-attr]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The stream is written in the request's own task, one coroutine deep (no writer task, no second
        # coroutine waiting on it: ~1.5 KB per open stream): the client's hang-up and the server's stop interrupt it by
        # cancelling this task while it writes (:meth:`_interrupt`), as the write timeout does.
        watcher = self._disconnected or watch_disconnect(scope, receive)
        watched = (watcher,) if self._stopped is None else (watcher, self._stopped)  # a tuple: no set for the stream's life
        self._task = asyncio.current_task()
        for future in watched:
            future.add_done_callback(self._interrupt)
        try:
            try:
                self._running = True
                try:
                    await self._run(scope, receive, send)
                finally:
                    self._running = False  # at once, before any other step: no interruption from here on
            except asyncio.CancelledError:
                interrupted = self._interrupted
                if interrupted is None or asyncio.current_task().uncancel():  # type: ignore[union-attr]
                    raise  # not (only) ours: the server ends every request
                if interrupted is _STOPPED and not watcher.done():  # the server stops: end the stream properly
                    await self._end_for_shutdown(scope, receive, send)
                elif interrupted is _TOO_LATE:
                    abandon_response(scope)
            if self.write_timed_out:
                abandon_response(scope)  # in the request's own task, where uvicorn logs
        finally:
            self._task = None
            for future in watched:
                future.remove_done_callback(self._interrupt)  # the server's stop signal outlives the stream
            if self._late is not None:
                self._late.cancel()
            try:
                await cancel_and_wait(watcher)
            finally:
                await self._source.close()

    def _interrupt(self, future: asyncio.Future[None]) -> None:
        """The client has gone or the server stops (``future`` is done): the stream's writing is
        cancelled, unless it has ended. An error response already being written is given
        :data:`SHUTDOWN_WRITE_TIMEOUT` to finish when the server stops."""
        if not self._running or self._interrupted is not None or self._task is None:
            return
        if future is not self._stopped:
            self._interrupted = _GONE
        elif self._answering_instead:
            if self._late is None:
                self._late = asyncio.get_running_loop().call_later(SHUTDOWN_WRITE_TIMEOUT, self._interrupt_late)
            return
        else:
            self._interrupted = _STOPPED
        self._task.cancel()

    def _interrupt_late(self) -> None:
        if self._running and self._interrupted is None and self._task is not None:
            self._interrupted = _TOO_LATE
            self._task.cancel()

    async def _end_for_shutdown(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One error event and the end of the stream (its writing was interrupted); before the status line, a 503 instead."""
        try:
            error = shutting_down()
            async with asyncio.timeout(SHUTDOWN_WRITE_TIMEOUT):  # a client that stopped reading gets no more time
                if not self._started:
                    await self._source.error_response(error, headers={"connection": "close"})(scope, receive, send)
                else:
                    await send({"type": "http.response.body", "body": self._source.error_event(error), "more_body": False})
        except TimeoutError:
            abandon_response(scope)

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct: DirectWrites | None = scope.get(DIRECT_WRITES)
        self._begun_by = (scope, send, direct) if direct is not None else None
        try:
            instead = await self._source.start()  # the source may begin the stream itself meanwhile (begin)
        finally:
            self._begun_by = None
        if instead is not None:
            self._answering_instead = True
            await instead(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        chunks = self._source.chunks(self if direct is not None else None)
        # The first chunk is made before anything is written, so that the status line and it leave
        # together: held (HOLD_WRITES) only across those two writes, not while a chunk is made.
        first = await anext(chunks, b"")
        hold_writes: Callable[[bool], None] | None = scope.get(HOLD_WRITES) if first and not self._started else None
        self._last_write = loop.time()
        heartbeat = _Heartbeat(self, send, asyncio.current_task(), self._source.keep_alive)  # type: ignore[arg-type]
        try:
            self._writing = True  # the heartbeat watches these writes too: a kept-alive client may not read
            if hold_writes is not None:
                hold_writes(True)
            try:
                if not self._started:  # else the source began the stream (begin)
                    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
                    self._started = True
                if first:
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                    first = b""  # written: not kept while the next is awaited
            finally:
                if hold_writes is not None:
                    hold_writes(False)
            self._writing = False
            self._loop, self._direct = loop, direct
            async for chunk in chunks:
                if chunk:
                    # The heartbeat watches the write: it cancels this task if the client does not take it in time.
                    self._last_write = loop.time()
                    self._writing = True
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    self._writing = False
                    chunk = b""  # written: not kept while the next is awaited
            self._direct = None
            self._finished = True
            self._last_write = loop.time()
            self._writing = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            self._writing = False
        except asyncio.CancelledError:
            if not self.write_timed_out or asyncio.current_task().uncancel():  # type: ignore[union-attr]
                raise  # a hang-up, or the server shutting down
            logger.warning("stopped a stream: its client took no data for %gs (write_timeout)", self._write_timeout)
        finally:
            self._direct = None
            heartbeat.cancel()


def _at_once(step: Awaitable[None]) -> bool:
    """Runs ``step`` (an ASGI ``send`` the connection said would not wait) to its end, in the caller's
    step; False when it would have waited (it is closed where it waited: a middleware's that hands the
    message to a task of its own has not handed it yet)."""
    steps = step.__await__()
    try:
        next(steps)
    except StopIteration:
        return True
    steps.close()
    return False


class _HeartbeatTicker:
    """One timer of the event loop for the heartbeats of all the streams on it that share a
    ``resolution``: each heartbeat waits in the slot (``resolution`` seconds wide) of its next check,
    and the timer wakes for the earliest slot only. A stream's heartbeat costs an entry in a set where
    it cost a timer of its own (uvloop's handle and libuv's timer: ~0.5 KB per open stream); a check
    comes at most ``resolution`` late. Kept in :data:`_TICKERS` while it has heartbeats to check."""

    __slots__ = ("_loop", "_resolution", "_slots", "_timer", "_armed")

    def __init__(self, loop: asyncio.AbstractEventLoop, resolution: float) -> None:
        self._loop = loop
        self._resolution = resolution
        self._slots: dict[int, set[_Heartbeat]] = {}  # slot number (time // resolution) -> heartbeats due then
        self._timer: asyncio.TimerHandle | None = None
        self._armed = 0  # the slot the timer wakes for

    @staticmethod
    def of(loop: asyncio.AbstractEventLoop, resolution: float) -> "_HeartbeatTicker":
        ticker = _TICKERS.get((loop, resolution))
        if ticker is None:
            ticker = _TICKERS[loop, resolution] = _HeartbeatTicker(loop, resolution)
        return ticker

    def add(self, heartbeat: "_Heartbeat", when: float) -> int:
        """Checks ``heartbeat`` at ``when`` (or up to ``resolution`` later); the slot it waits in."""
        slot = math.ceil(when / self._resolution)
        waiting = self._slots.get(slot)
        if waiting is None:
            waiting = self._slots[slot] = set()
        waiting.add(heartbeat)
        if self._timer is None or slot < self._armed:
            self._arm(slot)
        return slot

    def discard(self, heartbeat: "_Heartbeat", slot: int) -> None:
        waiting = self._slots.get(slot)
        if waiting is None:
            return
        waiting.discard(heartbeat)
        if not waiting:
            del self._slots[slot]
            if not self._slots:  # the last stream ended: no timer, no ticker left behind
                self._stop()

    def _arm(self, slot: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = slot
        self._timer = self._loop.call_at(slot * self._resolution, self._tick)

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if _TICKERS.get((self._loop, self._resolution)) is self:
            del _TICKERS[self._loop, self._resolution]

    def _tick(self) -> None:
        self._timer = None
        # The armed slot is due even if the loop woke a hair early (its clock's resolution).
        now = max(self._armed, int(self._loop.time() // self._resolution))
        for slot in sorted(slot for slot in self._slots if slot <= now):
            for heartbeat in self._slots.pop(slot):
                heartbeat.check()
        if self._slots:
            if self._timer is None:
                self._arm(min(self._slots))
        else:
            self._stop()


_TICKERS: dict[tuple[asyncio.AbstractEventLoop, float], _HeartbeatTicker] = {}
"""The heartbeat tickers with streams to check, by event loop and resolution."""

TICKS_PER_INTERVAL = 8
"""A heartbeat's checks come at most this fraction of the shorter of ``ping_interval`` and
``write_timeout`` late (its ticker's resolution)."""


class _Heartbeat:
    """Pings a quiet stream; cancels ``writer`` once a write has waited ``write_timeout`` for the
    client. Checked by its loop's :class:`_HeartbeatTicker`, not a task or a timer of its own: a stream
    that is writing costs no task, no coroutine and no timer for it; a task lives only while a ping is
    being written. :meth:`cancel` stops it."""

    __slots__ = ("_response", "_send", "_writer", "_keep_alive", "_loop", "_ticker", "_slot", "_ping")

    def __init__(self, response: EventStreamResponse, send: Send, writer: asyncio.Task[None], keep_alive: bytes) -> None:
        self._response = response
        self._send = send
        self._writer = writer
        self._keep_alive = keep_alive
        self._loop = asyncio.get_running_loop()
        resolution = min(response._ping_interval, response._write_timeout) / TICKS_PER_INTERVAL
        self._ticker = _HeartbeatTicker.of(self._loop, resolution)
        self._slot: int | None = None  # where it waits in the ticker; None while not waiting
        self._ping: asyncio.Task[None] | None = None
        self.check()

    def cancel(self) -> None:
        if self._slot is not None:
            self._ticker.discard(self, self._slot)
            self._slot = None
        if self._ping is not None:
            self._ping.cancel()

    def check(self) -> None:
        response = self._response
        self._slot = None
        since = self._loop.time() - response._last_write
        if response._writing:
            if since >= response._write_timeout:
                self._time_out()
                return
            wait = response._write_timeout - since
        elif since >= response._ping_interval:
            if response._finished:
                return
            response._last_write = self._loop.time()
            self._ping = self._loop.create_task(self._write_ping())
            return
        else:
            # Also awake by the time a write that begins now may have waited too long.
            wait = min(response._ping_interval - since, response._write_timeout)
        self._slot = self._ticker.add(self, self._loop.time() + wait)

    async def _write_ping(self) -> None:
        try:
            async with asyncio.timeout(self._response._write_timeout):
                await self._send({"type": "http.response.body", "body": self._keep_alive, "more_body": True})
        except TimeoutError:
            self._time_out()
            return
        finally:
            self._ping = None
        self.check()

    def _time_out(self) -> None:
        self._response.write_timed_out = True
        self._writer.cancel()
