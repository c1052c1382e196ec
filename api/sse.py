"""A streaming response that notices at once when the client goes away, keeps quiet connections
alive, and can still answer with a proper error status if the stream fails before it starts.

Starlette's ``StreamingResponse`` on ASGI 2.4 servers learns of a disconnect only when a write
fails, which during a long silent stretch (a model still thinking) can be minutes later. Here a
watcher waits for ``http.disconnect`` and cancels the writer, whose source then cancels the duet's
model calls. A heartbeat writes ``: ping`` when nothing was sent for ``ping_interval``. When the
server's drain time is over (``stopped``), the stream ends with one error event (or, before its
first byte, a 503).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Callable, Protocol

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .chunks import PING, ChunkEncoder
from .limits import shutting_down

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies not to buffer the stream
]


class EventSource(Protocol):
    """What an :class:`EventStreamResponse` streams."""

    async def start(self) -> Response | None:
        """Waits for the stream to begin. Returns a response to send *instead* (an error that
        happened before the first byte), or ``None`` to stream :meth:`chunks`."""

    def chunks(self) -> AsyncIterator[bytes]:
        """Framed SSE bytes."""

    async def close(self) -> None:
        """Called exactly once, however the response ends."""


async def wait_for_disconnect(receive: Receive, then: Callable[[], object] | None = None) -> None:
    """Returns when the client has gone (or the response is complete); calls ``then`` at once,
    in the same step, so what it cancels is cancelled without another turn of the loop."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if then is not None:
        then()


SHUTDOWN_WRITE_TIMEOUT = 1.0  # seconds the last error event may take to write when the server stops


class EventStreamResponse(Response):
    """Streams an :class:`EventSource` as ``text/event-stream``.

    The endpoint returns this at once; the status line is sent when the source has started, so
    the time the app takes to return a response overlaps with the models starting up."""

    media_type = "text/event-stream"

    def __init__(
        self,
        source: EventSource,
        *,
        ping_interval: float,
        disconnected: asyncio.Future[None] | None = None,
        stopped: asyncio.Future[None] | None = None,
    ) -> None:
        """``disconnected``: a :func:`wait_for_disconnect` task already watching (started before the
        run, so a client gone early never costs a model call); ``stopped``: done when the server
        ends every running request."""
        self.status_code = 200
        self.background = None
        self._source = source
        self._ping_interval = ping_interval
        self._disconnected = disconnected
        self._stopped = stopped
        self._last_write = 0.0  # set when the status line went out
        self._finished = False
        self._answering_instead = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.create_task(self._run(scope, receive, send))
        watcher = self._disconnected or asyncio.ensure_future(wait_for_disconnect(receive))
        waits: set[asyncio.Future[None]] = {writer, watcher}
        if self._stopped is not None:
            waits.add(self._stopped)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if writer.done():
                if writer.exception() is not None:
                    raise writer.exception()  # type: ignore[misc]
            elif not watcher.done():  # the server stops: end the stream properly
                await self._end_for_shutdown(writer, scope, receive, send)
        finally:
            for task in (writer, watcher):
                task.cancel()
            for task in (writer, watcher):
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task  # an error of the writer was raised above already
            await self._source.close()

    async def _end_for_shutdown(self, writer: asyncio.Task[None], scope: Scope, receive: Receive, send: Send) -> None:
        """One error event and the end of the stream; before the status line, a 503 instead."""
        with contextlib.suppress(TimeoutError):
            if self._answering_instead:  # an error response is already being written: let it finish
                await asyncio.wait_for(asyncio.shield(writer), SHUTDOWN_WRITE_TIMEOUT)
                return
            writer.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer
            error = shutting_down()
            async with asyncio.timeout(SHUTDOWN_WRITE_TIMEOUT):  # a client that stopped reading gets no more time
                if self._last_write == 0.0:
                    await error.response(headers={"connection": "close"})(scope, receive, send)
                else:
                    await send({"type": "http.response.body", "body": ChunkEncoder.error(error.body()), "more_body": False})

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        instead = await self._source.start()
        if instead is not None:
            self._answering_instead = True
            await instead(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        self._last_write = loop.time()
        heartbeat = asyncio.create_task(self._heartbeat(send))
        try:
            async for chunk in self._source.chunks():
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    self._last_write = loop.time()
            self._finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            heartbeat.cancel()

    async def _heartbeat(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._ping_interval - (loop.time() - self._last_write))
            if not self._finished and loop.time() - self._last_write >= self._ping_interval:
                await send({"type": "http.response.body", "body": PING, "more_body": True})
                self._last_write = loop.time()
