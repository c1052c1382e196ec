"""The request flow's streamed response (:mod:`duet.api._serving`): how a run's events become the stream."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from autogen_core import CancellationToken
from starlette.responses import JSONResponse

from duet.agents._events import ContentDelta, Failed, Finished
from duet.agents.pipeline._stream import DuetStream, EventChannel
from duet.api import _sse
from duet.api._serving import _collect_unless, _EventSource


class _Writer:
    def __init__(self) -> None:
        self.pending = b""

    def take(self) -> bytes:
        data, self.pending = self.pending, b""
        return data

    def error(self, error: Any) -> None:
        self.pending += b"data: error\n\n"


class _Renderer:
    def __init__(self, writer: _Writer) -> None:
        self.writer = writer

    def render(self, event: Any) -> None:
        self.writer.pending += b"data: error\n\n" if isinstance(event, Failed) else f"data: {event.text}\n\n".encode()


class _Protocol:
    keep_alive = b": ping\n\n"

    def error_response(self, error: Any, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": "instead"}, status_code=502)

    async def completed(self, request: Any, writer: Any) -> None:
        pass


class _Direct:
    def startable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        raise AssertionError("not writable")


async def _streamed(send: Any, *events: Any) -> None:
    """A streamed response of a run whose first ``events`` are emitted in one step while the stream waits
    for them (the first begins the stream, :meth:`_EventSource._first_through`), written through ``send``."""
    channel = EventChannel()
    driver = asyncio.ensure_future(asyncio.sleep(0))
    run = DuetStream(channel, driver, CancellationToken())  # type: ignore[arg-type]
    writer = _Writer()
    source = _EventSource(types.SimpleNamespace(in_flight=0), run, _Protocol(), None, _Renderer(writer), writer,  # type: ignore[arg-type]
                          first_wait=15)
    response = _sse.EventStreamResponse(source, ping_interval=15)  # type: ignore[arg-type]
    source.starter = response
    watched: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    scope = {"type": "http", _sse.DIRECT_WRITES: _Direct(), _sse.WATCH_DISCONNECT: lambda future, then: watched.set_result}
    writing = asyncio.ensure_future(response(scope, None, send))  # type: ignore[arg-type]
    for _ in range(3):
        await asyncio.sleep(0)  # the stream waits for its first event
    assert response.startable()
    for event in events:
        channel.emit(event)
    await asyncio.wait_for(writing, 5)
    await driver


def _recorder(sent: list[dict[str, Any]], waits: bool = False) -> Any:
    """ASGI's ``send`` as uvicorn checks it (one status line), recording into ``sent``; ``waits``: as a
    middleware's that hands each message to a task of its own (Starlette's ``BaseHTTPMiddleware``)."""

    async def send(message: dict[str, Any]) -> None:
        if waits:
            await asyncio.sleep(0)
        if message["type"] == "http.response.start" and any(m["type"] == message["type"] for m in sent):
            raise RuntimeError("Unexpected ASGI message 'http.response.start' sent, after response already started.")
        sent.append(message)

    return send


def test_a_failure_right_after_the_first_event_began_the_stream_is_its_error_event_not_a_second_status_line() -> None:
    """The first event begins the stream in the emitting agent's step (issue 28), and the run fails in that
    same step (the model's stream brought a token and its error in one read): the status line is out, so
    the failure is the stream's one error event; never a second ``http.response.start`` (uvicorn raises,
    the client's stream breaks off without its error)."""
    sent: list[dict[str, Any]] = []
    asyncio.run(_streamed(_recorder(sent), ContentDelta(text="first"), Failed(message="engine died", error=RuntimeError("engine died"))))
    assert [m["type"] for m in sent].count("http.response.start") == 1 and sent[0]["status"] == 200
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"data: first\n\ndata: error\n\n"


def test_a_send_that_would_wait_leaves_the_first_event_to_the_streams_task() -> None:
    """An app's middleware whose ``send`` waits (Starlette's ``BaseHTTPMiddleware`` with CORS on, where
    the whole middleware stack serves the protocol routes): the first event is not begun in the agent's
    step (no RuntimeError in it, the run goes on), and the stream's task sends the status line and it."""
    sent: list[dict[str, Any]] = []
    asyncio.run(_streamed(_recorder(sent, waits=True), ContentDelta(text="first"), ContentDelta(text="second"),
                          Failed(message="engine died", error=RuntimeError("engine died"))))
    assert [m["type"] for m in sent].count("http.response.start") == 1 and sent[0]["status"] == 200
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"data: first\n\ndata: second\n\ndata: error\n\n"


class _Collected:
    """A collected response's source: its run's events, read in the caller's task."""

    def __init__(self) -> None:
        self.channel = EventChannel()
        self.token = CancellationToken()
        self.run = DuetStream(self.channel, asyncio.ensure_future(asyncio.sleep(0)), self.token)  # type: ignore[arg-type]
        self.closed = 0

    async def collect(self) -> list[Any]:
        return [event async for event in self.run]

    async def close(self) -> None:
        self.closed += 1
        await self.run.close()


def _futures() -> tuple[asyncio.Future[None], asyncio.Future[None]]:
    loop = asyncio.get_running_loop()
    return loop.create_future(), loop.create_future()


def test_a_collected_run_is_read_in_the_requests_own_task() -> None:
    """A collected response's events are read in the request's task (issue 28): no task of its own and
    no ``asyncio.wait`` over it, the client's hang-up and the server's stop; all the events, the source closed once."""

    async def main() -> tuple[Any, int, _Collected, asyncio.Future[None]]:
        source = _Collected()
        disconnected, stopped = _futures()
        made = 0
        factory = asyncio.get_running_loop().get_task_factory()

        def counted(loop: Any, coro: Any, **kwargs: Any) -> Any:
            nonlocal made
            made += 1
            return factory(loop, coro, **kwargs) if factory is not None else asyncio.Task(coro, loop=loop, **kwargs)

        asyncio.get_running_loop().set_task_factory(counted)
        asyncio.get_running_loop().call_soon(source.channel.emit, ContentDelta(text="hello"))
        asyncio.get_running_loop().call_soon(source.channel.emit, Finished(finish_reason="stop"))
        async with asyncio.timeout(5):
            events = await _collect_unless(source, disconnected, stopped, source.token)  # type: ignore[arg-type]
        return events, made, source, stopped

    events, made, source, stopped = asyncio.run(main())
    assert [type(event) for event in events] == [ContentDelta, Finished]
    assert made == 0
    assert source.closed == 1 and not source.token.is_cancelled()
    assert not stopped._callbacks  # type: ignore[attr-defined]  # the server's stop signal outlives the request: nothing left on it


def test_a_client_that_hangs_up_or_a_server_that_stops_ends_the_collecting_and_stops_the_run() -> None:
    """The client's hang-up (or the server's stop) while a collected run goes on: no events (the caller
    answers 499, or 503), the run's token cancelled, the source closed once."""

    async def main(which: int) -> tuple[Any, _Collected]:
        source = _Collected()
        futures = _futures()
        asyncio.get_running_loop().call_soon(source.channel.emit, ContentDelta(text="hello"))
        asyncio.get_running_loop().call_later(0.01, futures[which].set_result, None)
        async with asyncio.timeout(5):
            ended_by = await _collect_unless(source, *futures, source.token)  # type: ignore[arg-type]
        return futures.index(ended_by), source  # type: ignore[arg-type]

    for which in (0, 1):
        events, source = asyncio.run(main(which))
        assert events == which  # which of the two ended it: the caller's 499, or 503
        assert source.token.is_cancelled() and source.closed == 1


def test_a_server_stop_is_told_from_a_hang_up_when_the_hang_up_watcher_is_a_task() -> None:
    """On another ASGI server the hang-up watcher is a task (``watch_disconnect``'s fallback), which counts
    as cancelled only once the loop runs it again: a server stop is still told as the stop (503), not as
    the client's hang-up (499)."""

    async def main() -> bool:
        source = _Collected()
        source.close = _closes_at_once(source)  # type: ignore[method-assign]  # a run already over: closing does not yield
        watcher = asyncio.ensure_future(asyncio.Event().wait())
        stopped = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, stopped.set_result, None)
        async with asyncio.timeout(5):
            ended_by = await _collect_unless(source, watcher, stopped, source.token)  # type: ignore[arg-type]
        return ended_by is stopped

    assert asyncio.run(main())


def _closes_at_once(source: Any) -> Any:
    async def close() -> None:
        source.closed += 1

    return close


def test_a_cancelled_request_task_is_not_taken_for_a_hang_up() -> None:
    """The server cancels the request's task itself (a forced shutdown): the cancellation goes on up, the
    run is stopped and its source closed."""

    async def main() -> _Collected:
        source = _Collected()
        disconnected, stopped = _futures()
        collecting = asyncio.ensure_future(_collect_unless(source, disconnected, stopped, source.token))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        collecting.cancel()
        try:
            await collecting
        except asyncio.CancelledError:
            return source
        raise AssertionError("the cancellation was swallowed")

    source = asyncio.run(main())
    assert source.closed == 1 and source.token.is_cancelled()


class _BatchesOnly:
    """A run read only by its batches (iterating it event by event fails)."""

    def __init__(self, batches: list[list[Any]]) -> None:
        self.batches = batches
        self.ended = False

    async def next_batch(self) -> list[Any]:
        batch = self.batches.pop(0)
        self.ended = not self.batches
        return batch

    def __aiter__(self) -> Any:
        raise AssertionError("read event by event")


def test_a_collected_run_is_read_a_batch_at_a_time() -> None:
    """A collected response takes its run's events a batch at a time (issue 28): a long answer costs no
    call per event on its way to the collected body."""
    hello, world, end = ContentDelta(text="hello"), ContentDelta(text="world"), Finished(finish_reason="stop")
    run = _BatchesOnly([[hello, world], [end]])
    source = _EventSource(types.SimpleNamespace(in_flight=0), run, _Protocol(), None)  # type: ignore[arg-type]
    assert asyncio.run(source.collect()) == [hello, world, end]
