"""What the edge admits: a bounded body read in bounded time, a bound on what all bodies being
read hold together, a cap on completions running at once, and the shutdown state every running
request watches."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from starlette.requests import ClientDisconnect, Request

from .errors import APIError
from .settings import ServiceOptions

RETRY_AFTER_SECONDS = "1"


def is_json(content_type: str | None) -> bool:
    """``application/json``, with or without parameters (``; charset=utf-8``)."""
    return content_type is not None and content_type.partition(";")[0].strip().lower() == "application/json"


def _too_large(max_bytes: int) -> APIError:
    return APIError(413, f"the request body is larger than this server accepts ({max_bytes} bytes)", code="request_too_large")


class RequestGate:
    """Admits request bodies up to ``max_pending_body_bytes`` together, completions up to
    ``max_concurrent_requests`` (a body being read is not a completion yet: slow senders cannot
    lock the completions out), and knows when the server shuts down.

    ``draining``: the server stopped accepting; new requests get 503. ``stopped``: the drain time
    is over; every running request ends now (a stream with one error event, others with 503).
    """

    def __init__(self, options: ServiceOptions) -> None:
        self.max_running = options.max_concurrent_requests
        self.starting = 0  # requests with their body read whose run has not started yet
        self.max_body_bytes = options.max_body_bytes
        self.body_timeout = options.body_timeout
        self.max_pending_body_bytes = options.max_pending_body_bytes
        self.pending_body_bytes = 0  # what the bodies being read or parsed hold (declared, or read so far)
        self.draining = False
        self._stopped: asyncio.Future[None] | None = None

    @property
    def stopped(self) -> asyncio.Future[None]:
        """Done when running requests must end; shared by all of them (no task per request)."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
        return self._stopped

    def refusal(self, running: int) -> APIError | None:
        """Why a new completion cannot start now, with ``running`` already admitted; None if it can."""
        if self.draining:
            return shutting_down()
        if running >= self.max_running:
            return APIError(503, f"the server is at its limit of {self.max_running} concurrent requests; retry shortly",
                            type="server_error", code="server_busy")
        return None

    def _busy(self) -> APIError:
        return APIError(503, "the server holds as many request bodies as it may; retry shortly", type="server_error",
                        code="server_busy", headers={"Retry-After": RETRY_AFTER_SECONDS})

    @contextlib.asynccontextmanager
    async def body(self, request: Request) -> AsyncIterator[bytes]:
        """The request body, held against ``max_pending_body_bytes`` (503 when that is full) until
        the block ends. Refuses a body over ``max_body_bytes`` (413) before reading it when its
        Content-Length says so, or as soon as a chunked one passes it; 408 if it takes longer than
        ``body_timeout``; :class:`ClientDisconnect` if the client hangs up. The server reads the
        socket only as fast as this consumes it, so at most one read-ahead window per connection
        is held beyond what is counted."""
        max_bytes = self.max_body_bytes
        declared = request.headers.get("content-length")
        reserved = 0
        if declared is not None:
            if not declared.isdigit():
                raise APIError(400, "invalid Content-Length header", code="invalid_request")
            reserved = int(declared)
            if reserved > max_bytes:
                raise _too_large(max_bytes)
            if self.pending_body_bytes + reserved > self.max_pending_body_bytes:
                raise self._busy()
            self.pending_body_bytes += reserved
        try:
            chunks: list[bytes] = []
            size = 0
            receive = request.receive
            try:
                async with asyncio.timeout(self.body_timeout):
                    while True:
                        message = await receive()
                        if message["type"] == "http.disconnect":
                            raise ClientDisconnect()
                        chunk = message.get("body", b"")
                        if chunk:
                            size += len(chunk)
                            if size > max_bytes:
                                raise _too_large(max_bytes)
                            if size > reserved:  # chunked (or longer than declared): counted as it comes
                                if self.pending_body_bytes + size - reserved > self.max_pending_body_bytes:
                                    raise self._busy()
                                self.pending_body_bytes += size - reserved
                                reserved = size
                            chunks.append(chunk)
                        if not message.get("more_body", False):
                            break
            except TimeoutError:
                raise APIError(408, f"the request body did not arrive within {self.body_timeout:g} s",
                               code="request_timeout") from None
            yield chunks[0] if len(chunks) == 1 else b"".join(chunks)
        finally:
            self.pending_body_bytes -= reserved

    def drain(self) -> None:
        self.draining = True

    def stop(self) -> None:
        self.draining = True
        if not self.stopped.done():
            self.stopped.set_result(None)


def shutting_down() -> APIError:
    return APIError(503, "the server is shutting down; retry on another replica or shortly", type="server_error",
                    code="server_shutting_down")
