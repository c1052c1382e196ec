"""A streaming response that notices at once when the client goes away, and keeps quiet
connections alive.

Starlette's ``StreamingResponse`` on ASGI 2.4 servers learns of a disconnect only when a write
fails, which during a long silent stretch (a model still thinking) can be minutes later. Here a
watcher waits for ``http.disconnect`` and cancels the writer, whose body iterator then cancels the
duet's model calls. A heartbeat writes ``: ping`` when nothing was sent for ``ping_interval``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Awaitable, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .chunks import PING

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies not to buffer the stream
]


async def wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStreamResponse(Response):
    """Sends ``body`` (already framed SSE bytes) as ``text/event-stream``; ``on_close`` runs however
    the response ends."""

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], *, on_close: Callable[[], Awaitable[None]], ping_interval: float) -> None:
        self.status_code = 200
        self.background = None
        self._body = body
        self._on_close = on_close
        self._ping_interval = ping_interval
        self._last_write = 0.0
        self._finished = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            self._last_write = loop.time()
            writer = asyncio.create_task(self._write(send))
            tasks = [writer, asyncio.create_task(wait_for_disconnect(receive)), asyncio.create_task(self._heartbeat(send))]
            await asyncio.wait(tasks[:2], return_when=asyncio.FIRST_COMPLETED)
            if writer.done() and not writer.cancelled() and writer.exception() is not None:
                raise writer.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task  # an error of the writer was raised above already
            await self._on_close()

    async def _write(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for chunk in self._body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self._last_write = loop.time()
            self._finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self._body.aclose()  # type: ignore[attr-defined]

    async def _heartbeat(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._ping_interval - (loop.time() - self._last_write))
            if not self._finished and loop.time() - self._last_write >= self._ping_interval:
                await send({"type": "http.response.body", "body": PING, "more_body": True})
                self._last_write = loop.time()
