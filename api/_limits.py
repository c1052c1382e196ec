"""What the edge admits: a bounded body read in bounded time, a bound on what all bodies being
read hold together, a cap on completions running at once, and the shutdown state every running
request watches."""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect, Request

from duet.api._errors import APIError
from duet.api._settings import ServiceOptions

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

    def admit(self, running: int) -> None:
        """Raises :meth:`refusal`'s error (with ``Retry-After``) when a new completion cannot start now."""
        refusal = self.refusal(running)
        if refusal is not None:
            refusal.headers = {"Retry-After": RETRY_AFTER_SECONDS}
            raise refusal

    def _busy(self) -> APIError:
        return APIError(503, "the server holds as many request bodies as it may; retry shortly", type="server_error",
                        code="server_busy", headers={"Retry-After": RETRY_AFTER_SECONDS})

    def body(self, request: Request) -> "HeldBody":
        """The request body (``async with gate.body(request) as raw``), held against
        ``max_pending_body_bytes`` (503 when that is full) until the block ends. Refuses a body over
        ``max_body_bytes`` (413) before reading it when its Content-Length says so, or as soon as a
        chunked one passes it; 408 if it takes longer than ``body_timeout``; :class:`ClientDisconnect`
        if the client hangs up. The server reads the socket only as fast as this consumes it, so at
        most one read-ahead window per connection is held beyond what is counted."""
        return HeldBody(self, request)

    def drain(self) -> None:
        self.draining = True

    def stop(self) -> None:
        self.draining = True
        if not self.stopped.done():
            self.stopped.set_result(None)


def shutting_down() -> APIError:
    return APIError(503, "the server is shutting down; retry on another replica or shortly", type="server_error",
                    code="server_shutting_down")


class HeldBody:
    """A request body being read, then held against the gate's byte budget (:meth:`RequestGate.body`).

    A class, not a generator-based context manager, and its time limit one timer of the event loop
    rather than ``asyncio.timeout``: it is on the way of every request, whose body has nearly always
    arrived whole before it is read."""

    __slots__ = ("_gate", "_request", "_reserved", "_timed_out")

    def __init__(self, gate: RequestGate, request: Request) -> None:
        self._gate = gate
        self._request = request
        self._reserved = 0
        self._timed_out = False

    async def __aenter__(self) -> bytes:
        gate = self._gate
        max_bytes = gate.max_body_bytes
        declared = self._request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise APIError(400, "invalid Content-Length header", code="invalid_request")
            reserved = int(declared)
            if reserved > max_bytes:
                raise _too_large(max_bytes)
            if gate.pending_body_bytes + reserved > gate.max_pending_body_bytes:
                raise gate._busy()
            gate.pending_body_bytes += reserved
            self._reserved = reserved
        try:
            return await self._read(max_bytes)
        except BaseException:
            self._release()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._release()

    def _release(self) -> None:
        self._gate.pending_body_bytes -= self._reserved
        self._reserved = 0

    async def _read(self, max_bytes: int) -> bytes:
        gate = self._gate
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        timer = asyncio.get_running_loop().call_later(gate.body_timeout, self._time_out, task)
        chunks: list[bytes] = []
        size = 0
        receive = self._request.receive
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                if chunk:
                    size += len(chunk)
                    if size > max_bytes:
                        raise _too_large(max_bytes)
                    if size > self._reserved:  # chunked (or longer than declared): counted as it comes
                        if gate.pending_body_bytes + size - self._reserved > gate.max_pending_body_bytes:
                            raise gate._busy()
                        gate.pending_body_bytes += size - self._reserved
                        self._reserved = size
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        except asyncio.CancelledError:
            if self._timed_out and task.uncancel() <= cancelling:  # this timer's cancellation, no one else's
                raise APIError(408, f"the request body did not arrive within {gate.body_timeout:g} s",
                               code="request_timeout") from None
            raise
        finally:
            timer.cancel()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _time_out(self, task: asyncio.Task[object]) -> None:
        self._timed_out = True
        task.cancel()
