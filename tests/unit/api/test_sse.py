"""The streams' heartbeats on one ticker: each stream is checked when its ping or its write timeout is
due (at most the ticker's resolution late), a stream that ends leaves it, and the ticker goes with
its last stream."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from duet.api import _sse
from duet.api._sse import TICKS_PER_INTERVAL, _Heartbeat


class _Stream:
    """What a heartbeat reads of its :class:`~duet.api._sse.EventStreamResponse`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ping_interval: float, write_timeout: float) -> None:
        self._ping_interval = ping_interval
        self._write_timeout = write_timeout
        self._last_write = loop.time()
        self._writing = False
        self._finished = False
        self.write_timed_out = False


def _heartbeat(stream: _Stream, sent: list[tuple[float, bytes]], writer: Any) -> _Heartbeat:
    loop = asyncio.get_running_loop()

    async def send(message: dict[str, Any]) -> None:
        sent.append((loop.time(), message["body"]))

    return _Heartbeat(stream, send, writer, b": ping\n\n")  # type: ignore[arg-type]


def test_each_stream_is_pinged_on_time_by_one_timer() -> None:
    interval = 0.08
    late = interval / TICKS_PER_INTERVAL

    async def main() -> list[list[float]]:
        loop = asyncio.get_running_loop()
        writer = loop.create_future()
        streams, sent = [], []
        for _ in range(3):
            stream = _Stream(loop, interval, 10.0)
            pings: list[tuple[float, bytes]] = []
            streams.append((stream, pings, _heartbeat(stream, pings, writer)))
            sent.append(pings)
            await asyncio.sleep(interval / 3)
        assert len(_sse._TICKERS) == 1  # one ticker (one timer) for the three streams
        await asyncio.sleep(interval * 3)
        for _, _, heartbeat in streams:
            heartbeat.cancel()
        assert not _sse._TICKERS  # gone with its last stream
        return [[at for at, _ in pings] for pings in sent]

    for pings in asyncio.run(main()):
        assert len(pings) >= 2
        for earlier, later in itertools.pairwise(pings):
            assert interval - 0.005 <= later - earlier <= interval + late + 0.25  # and the loop's own delay on a busy machine


def test_a_write_the_client_does_not_take_is_timed_out_and_a_written_stream_is_not_pinged() -> None:
    async def main() -> tuple[bool, bool, list[Any], list[Any]]:
        loop = asyncio.get_running_loop()
        stuck_writer, busy_writer = loop.create_task(asyncio.sleep(10)), loop.create_task(asyncio.sleep(10))
        stuck, busy = _Stream(loop, 10.0, 0.1), _Stream(loop, 0.1, 10.0)
        stuck._writing = True
        stuck_pings: list[Any] = []
        busy_pings: list[Any] = []
        heartbeats = [_heartbeat(stuck, stuck_pings, stuck_writer), _heartbeat(busy, busy_pings, busy_writer)]
        for _ in range(10):
            busy._last_write = loop.time()  # a token every 30 ms: never quiet for the ping interval
            await asyncio.sleep(0.03)
        for heartbeat in heartbeats:
            heartbeat.cancel()
        busy_writer.cancel()
        await asyncio.gather(stuck_writer, busy_writer, return_exceptions=True)
        return stuck.write_timed_out and stuck_writer.cancelled(), busy.write_timed_out, stuck_pings, busy_pings

    timed_out, busy_timed_out, stuck_pings, busy_pings = asyncio.run(main())
    assert timed_out and not busy_timed_out
    assert stuck_pings == [] and busy_pings == []
    assert not _sse._TICKERS


class _Direct:
    """The edge server's direct writes (:class:`~duet.api._sse.DirectWrites`), as a test sets them."""

    def __init__(self) -> None:
        self.open = True

    def startable(self) -> bool:
        return self.open

    def writable(self) -> bool:
        return False  # every later chunk goes through ``send``

    def write(self, data: bytes) -> None:
        raise AssertionError("not writable")


class _BegunSource:
    """A source whose first event comes while the stream waits for it: it begins the stream itself."""

    keep_alive = b": ping\n\n"

    def __init__(self) -> None:
        self.starter: _sse.EventStreamResponse | None = None
        self.first = asyncio.Event()

    async def start(self) -> None:
        await self.first.wait()

    async def chunks(self, direct: Any = None) -> Any:
        yield b""  # the first event was written by begin
        yield b"data: second\n\n"

    async def close(self) -> None:
        pass


def test_a_source_begins_the_stream_in_its_own_step_and_the_status_line_is_sent_once() -> None:
    """The first event goes out with the status line in the step of whoever emits it (issue 28: one
    pass of the event loop less to the first token), through ``send``; the stream's task then goes on
    from there without sending the status line again."""

    async def main() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        source = _BegunSource()
        response = _sse.EventStreamResponse(source, ping_interval=15)  # type: ignore[arg-type]
        watched: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        scope = {_sse.DIRECT_WRITES: _Direct(), _sse.WATCH_DISCONNECT: lambda future, then: watched.set_result}
        writing = asyncio.ensure_future(response(scope, None, send))  # type: ignore[arg-type]
        for _ in range(3):
            await asyncio.sleep(0)  # the stream waits for its first event
        assert not sent and response.startable()
        response.begin(b"data: first\n\n")  # in this task's step: written before the stream's task runs again
        assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"] and sent[1]["body"] == b"data: first\n\n"
        assert not response.startable()  # begun once
        source.first.set()
        await asyncio.wait_for(writing, 5)
        return sent

    sent = asyncio.run(main())
    assert [m["type"] for m in sent].count("http.response.start") == 1
    assert [m.get("body") for m in sent[2:]] == [b"data: second\n\n", b""]
