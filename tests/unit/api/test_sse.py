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
