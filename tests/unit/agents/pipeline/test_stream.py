"""The channel between a run's agents and its reader: events handed straight to a waiting reader's
``deliver`` (the write-through), queued when it declines or something waits before them, and the end
event always queued."""

from __future__ import annotations

import asyncio

from duet.agents import ContentDelta, Finished, ReasoningDelta
from duet.agents._events import DuetEvent
from duet.agents.pipeline._stream import EventChannel


def test_a_waiting_reader_is_handed_each_event_without_being_woken() -> None:
    async def main() -> None:
        channel = EventChannel()
        delivered: list[DuetEvent] = []

        def deliver(event: DuetEvent) -> bool:
            delivered.append(event)
            return True

        reader = asyncio.ensure_future(channel.drain(deliver=deliver))
        await asyncio.sleep(0)  # the reader waits
        first, second = ReasoningDelta(text="a", source="reasoner"), ContentDelta(text="b")
        assert channel.emit(first) and channel.emit(second)
        assert delivered == [first, second]
        await asyncio.sleep(0)
        assert not reader.done()  # taken in the emitting step: nothing woke the reader
        end = Finished(finish_reason="stop")
        channel.emit(end)  # the end is never handed over: the reader finishes the response itself
        assert await asyncio.wait_for(reader, 5) == [end] and delivered == [first, second]

    asyncio.run(main())


def test_a_declined_event_is_queued_and_wakes_the_reader_and_order_holds() -> None:
    async def main() -> None:
        channel = EventChannel()
        offered: list[DuetEvent] = []

        def decline(event: DuetEvent) -> bool:  # a client that is slow to read: the transport is paused
            offered.append(event)
            return False

        reader = asyncio.ensure_future(channel.drain(deliver=decline))
        await asyncio.sleep(0)
        first, second = ContentDelta(text="a"), ContentDelta(text="b")
        channel.emit(first)
        channel.emit(second)  # something is queued before it: not offered, queued behind it
        assert offered == [first]
        assert await asyncio.wait_for(reader, 5) == [first, second]

        taken: list[DuetEvent] = []
        channel.emit(ContentDelta(text="c"))  # no reader waiting: queued, whatever deliver said before
        assert taken == [] and [e.text for e in await channel.drain(deliver=taken.append)] == ["c"]  # type: ignore[attr-defined]

    asyncio.run(main())


def test_a_reader_that_stops_waiting_is_no_longer_handed_events() -> None:
    async def main() -> None:
        channel = EventChannel()
        delivered: list[DuetEvent] = []
        reader = asyncio.ensure_future(channel.drain(deliver=lambda event: delivered.append(event) is None))
        await asyncio.sleep(0)
        reader.cancel()  # the client hung up
        await asyncio.gather(reader, return_exceptions=True)
        late = ContentDelta(text="late")
        channel.emit(late)
        assert delivered == [] and await asyncio.wait_for(channel.drain(), 5) == [late]

    asyncio.run(main())
