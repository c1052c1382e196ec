"""A run in progress, as its caller reads it: the bounded channel the agents emit events into, and
:class:`DuetStream`, which hands them out in batches."""

from __future__ import annotations

import asyncio
from typing import Callable

from autogen_core import CancellationToken

from duet.agents._events import DuetEvent, Failed, Finished

# The last event of every run. Matched by exact type: events are final models, and isinstance
# on a pydantic model goes through ABCMeta (about 3x the cost per event).
_END_EVENTS = (Finished, Failed)

MAX_BUFFERED_EVENTS = 128
"""Events a run may get ahead of its reader before its agents wait for the reader (backpressure)."""

Deliver = Callable[[DuetEvent], bool]
"""Takes one event at once, in the emitting task, while the reader waits for the next (True), or
declines it (False: it is queued, and the reader woken, as usual)."""


class EventChannel:
    """Events from the agents to the caller. Collects what arrives while the caller is busy, so
    a burst is handed over (and written to the client) as one batch.

    Bounded: once ``capacity`` events wait, :meth:`emit` returns False and the agent awaits
    :meth:`room`, which returns when the caller has taken them (or the run is ending). A client
    that stops reading thus stops the agents, which stop reading their model's stream, whose
    server then stops writing: nothing piles up in between. While there is room, an event costs
    one append and no task or future.

    A reader that waits with a ``deliver`` callable (:meth:`drain`) is handed each event at once, in
    the agent's own step, as long as nothing is queued before it (end events never are): a token then
    goes from its model's stream to the client's without waking the reader, one pass of the event loop
    less per token."""

    __slots__ = ("_events", "_waiter", "_room", "_capacity", "_closed", "_request_out", "_request_out_waiters", "_deliver")

    def __init__(self, capacity: int = MAX_BUFFERED_EVENTS) -> None:
        self._events: list[DuetEvent] = []
        self._waiter: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._capacity = capacity
        self._closed = False
        self._request_out = False
        self._request_out_waiters: list[asyncio.Future[None]] | None = None
        self._deliver: Deliver | None = None  # set only while the reader waits in drain(), nothing queued

    def emit(self, event: DuetEvent) -> bool:
        """Queues ``event`` (or hands it to the waiting reader's ``deliver``); False when the caller is
        ``capacity`` events behind (await :meth:`room`)."""
        if not self._request_out:
            self.mark_request_out()
        events = self._events
        deliver = self._deliver
        if deliver is not None and not events and type(event) not in _END_EVENTS and deliver(event):
            return True
        events.append(event)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        return len(events) < self._capacity

    async def room(self) -> None:
        """Waits until the caller has taken the queued events, or the run is ending (:meth:`close`)."""
        while len(self._events) >= self._capacity and not self._closed:
            if self._room is None or self._room.done():
                self._room = asyncio.get_running_loop().create_future()
            await self._room

    def close(self) -> None:
        """The run is ending (cancelled, or its reader is gone): agents no longer wait for room."""
        self._closed = True
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    def mark_request_out(self) -> None:
        """The run's first model request has been written (or it emitted an event, or it ended: past that point)."""
        self._request_out = True
        waiters, self._request_out_waiters = self._request_out_waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    async def wait_request_out(self, timeout: float) -> None:
        """Returns once the run's first model request is out (:meth:`mark_request_out`), or after ``timeout`` seconds."""
        if self._request_out:
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        if self._request_out_waiters is None:
            self._request_out_waiters = [waiter]
        else:
            self._request_out_waiters.append(waiter)
        timer = loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            waiters = self._request_out_waiters
            if waiters is not None and waiter in waiters:  # timed out, or the caller was cancelled
                waiters.remove(waiter)

    def wake(self) -> None:
        """Ends the reader's wait in :meth:`drain` (it returns what has arrived: maybe nothing)."""
        if self._waiter is not None:
            _wake(self._waiter)

    async def drain(self, timeout: float | None = None, deliver: Deliver | None = None) -> list[DuetEvent]:
        """Everything emitted since the last call; waits for at least one event, or ``timeout``
        seconds (then returns an empty list). While it waits, ``deliver`` is offered each event first."""
        if not self._events:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(timeout, _wake, waiter) if timeout is not None else None
            self._deliver = deliver
            try:
                await waiter
            finally:
                self._deliver = None
                if timer is not None:
                    timer.cancel()
        events, self._events = self._events, []
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
        return events


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class DuetStream:
    """One run of the duet, in progress. Read it in batches (:meth:`next_batch`) or event by event
    (``async for``); :meth:`close` stops whatever still runs (every model and tool call)."""

    def __init__(self, channel: EventChannel, driver: asyncio.Task[None], token: CancellationToken) -> None:
        self._channel = channel
        self._driver = driver
        self._token = token
        self.ended = False
        """The final event (``Finished`` or ``Failed``) has been handed out (the stream sets it; a reader reads it)."""
        self._pending: list[DuetEvent] = []
        driver.add_done_callback(lambda _: channel.mark_request_out())  # an ended run is past its first request too

    async def request_out(self, timeout: float) -> None:
        """Returns once the run's first model request has been written to its connection, or the run
        has emitted an event or ended; at the latest after ``timeout`` seconds. What a caller
        prepares after it is done while the model works, not before its request goes out."""
        await self._channel.wait_request_out(timeout)

    async def next_batch(self, timeout: float | None = None, deliver: Deliver | None = None) -> list[DuetEvent]:
        """The events that arrived since the last batch (waiting for one if none did); an empty
        list after ``timeout`` seconds without events, or once the run has ended. While it waits,
        each event is offered to ``deliver`` first, in the emitting task (the end event never is):
        what it takes is not in the batch."""
        if self.ended:
            return []
        batch = await self._channel.drain(timeout, deliver)
        for index, event in enumerate(batch):
            if type(event) in _END_EVENTS:
                self.ended = True
                return batch[: index + 1]
        return batch

    def wake(self) -> None:
        """Ends the reader's wait in :meth:`next_batch` at once (it returns what has arrived: maybe
        nothing): a ``deliver`` that took an event the reader must act on calls it."""
        self._channel.wake()

    def __aiter__(self) -> "DuetStream":
        return self

    async def __anext__(self) -> DuetEvent:
        while not self._pending:
            if self.ended:
                raise StopAsyncIteration
            self._pending = await self.next_batch()
        return self._pending.pop(0)

    async def close(self) -> None:
        """Stops the run if it is still going. A run that has handed out its last event is only
        settling its team for reuse; that finishes on its own, off the caller's path."""
        if self._driver.done() or self.ended:
            return
        self._token.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._driver), timeout=10)
        except TimeoutError:
            self._driver.cancel()
        except asyncio.CancelledError:  # the caller itself is being cancelled: stop the run, then let it go
            self._driver.cancel()
            raise
