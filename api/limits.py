"""What the edge admits: a bounded body read in bounded time, a cap on completions running at
once, and the shutdown state every running request watches."""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from .errors import APIError
from .settings import ServiceOptions

RETRY_AFTER_SECONDS = "1"


class ClientGone(Exception):
    """The client hung up before its request was read."""


def is_json(content_type: str | None) -> bool:
    """``application/json``, with or without parameters (``; charset=utf-8``)."""
    return content_type is not None and content_type.partition(";")[0].strip().lower() == "application/json"


async def read_body(request: Request, max_bytes: int, timeout: float) -> bytes:
    """The request body, refusing one over ``max_bytes`` (413) before reading it when its
    Content-Length says so, or as soon as a chunked one passes it; 408 if it takes longer than
    ``timeout``. The server reads the socket only as fast as this consumes it, so at most one
    read-ahead window per connection is held beyond what is returned."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise APIError(400, "invalid Content-Length header", code="invalid_request")
        if int(declared) > max_bytes:
            raise APIError(413, f"the request body is larger than this server accepts ({max_bytes} bytes)",
                           code="request_too_large")
    chunks: list[bytes] = []
    size = 0
    receive = request.receive
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone()
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > max_bytes:
                        raise APIError(413, f"the request body is larger than this server accepts ({max_bytes} bytes)",
                                       code="request_too_large")
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise APIError(408, f"the request body did not arrive within {timeout:g} s", code="request_timeout") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class RequestGate:
    """Admits completions up to ``max_concurrent_requests`` and knows when the server shuts down.

    ``draining``: the server stopped accepting; new requests get 503. ``stopped``: the drain time
    is over; every running request ends now (a stream with one error event, others with 503).
    """

    def __init__(self, options: ServiceOptions) -> None:
        self.max_running = options.max_concurrent_requests
        self.admitting = 0  # requests past the gate whose run has not started yet (reading their body)
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

    def drain(self) -> None:
        self.draining = True

    def stop(self) -> None:
        self.draining = True
        if not self.stopped.done():
            self.stopped.set_result(None)


def shutting_down() -> APIError:
    return APIError(503, "the server is shutting down; retry on another replica or shortly", type="server_error",
                    code="server_shutting_down")
