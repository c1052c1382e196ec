"""What waits in a lean runtime and its teams, made lighter: queues whose lines are made on first use,
a team's output queue that hands items over as futures, and a FIFO lock without a queue of its own.

A pipeline keeps a team, and so a runtime, its agents and their queues, for every request in flight
and every idle team in its pool: each deque a queue makes and never uses is ~760 bytes kept for each.
All of it relies on the fields of ``asyncio.Queue`` and of autogen-core's copy of it (0.7.5, pinned).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Literal


class _FirstWaitEvent(asyncio.Event):
    """An ``asyncio.Event`` whose waiting list is made by the first ``wait()`` (an event that is only
    set, cleared and read holds none)."""

    def __init__(self) -> None:  # asyncio.Event.__init__ would make the deque
        self._waiters = ()  # type: ignore[assignment]  # iterated by set(): empty until someone waits
        self._value = False

    async def wait(self) -> Literal[True]:
        if not self._value and isinstance(self._waiters, tuple):
            self._waiters = collections.deque()
        return await super().wait()


def lighten_queue(queue: Any) -> Any:
    """Drops the two of an unbounded queue's four deques (~760 bytes each) it uses only when waited
    on: the putters' line (a put on an unbounded queue never waits) and the ``join()`` event's
    waiting list (made by the first ``join()``). For an ``asyncio.Queue`` or autogen-core's copy of
    it (the same fields; 0.7.5, pinned); a bounded queue is returned as it is. A team and its
    runtime each hold such a queue, and a pipeline keeps a team for every request in flight."""
    if queue._maxsize <= 0 and not queue._putters and queue._finished.is_set():
        queue._putters = ()
        finished = _FirstWaitEvent()
        finished.set()
        queue._finished = finished
    return queue


def unbind_finished(queue: Any) -> None:
    """Gives a queue a runtime's next run takes over a new ``join()`` event (set: the queue holds
    nothing) if its own was waited on: an ``asyncio.Event`` is bound to the loop of its first wait, and
    the next run may be on another loop (the stock runtime makes a new queue at every stop)."""
    if getattr(queue._finished, "_loop", None) is not None:
        finished = _FirstWaitEvent()
        finished.set()
        queue._finished = finished


class LinesMadeOnUse:
    """For a queue class (``asyncio.Queue`` or autogen-core's copy of it: the same fields; 0.7.5,
    pinned): its items' and its getters' deques (~760 bytes each) are made by the first put and the
    first get that waits. A team's queues are held by every pooled team, and most never queue."""

    _queue: Any
    _getters: Any

    def _lines_made_on_use(self) -> None:
        self._queue = self._getters = ()  # read as empty until then

    def _put(self, item: Any) -> None:
        if type(self._queue) is tuple:
            self._queue = collections.deque()
        self._queue.append(item)

    def _getters_line(self) -> collections.deque[asyncio.Future[Any]]:
        if type(self._getters) is tuple:
            self._getters = collections.deque()
        getters: collections.deque[asyncio.Future[Any]] = self._getters
        return getters


class HandOverQueue(LinesMadeOnUse, asyncio.Queue[Any]):
    """An unbounded ``asyncio.Queue`` whose ``get()`` returns a future (awaited as the coroutine
    was) instead of a coroutine, and whose ``put`` hands an item straight to a waiting ``get``.

    For a team's output queue: AgentChat's ``run_stream`` (0.7.5, pinned) waits for each message as
    ``ensure_future(queue.get())``, a task (and its coroutine) for every message of every run; a
    future is taken as it is. Nothing calls ``task_done`` or ``join`` on it."""

    def __init__(self) -> None:
        super().__init__()
        self._lines_made_on_use()

    def get(self) -> asyncio.Future[Any]:  # type: ignore[override]
        future = self._get_loop().create_future()  # type: ignore[attr-defined]  # asyncio's own (typeshed omits it)
        if self._queue:
            future.set_result(self.get_nowait())
        elif type(self._getters) is tuple:
            self._getters = [future]  # a list: a run waits for one message at a time (a deque is ~760 bytes)
        else:
            self._getters.append(future)
        return future

    def put_nowait(self, item: Any) -> None:
        self._unfinished_tasks += 1  # type: ignore[attr-defined]  # asyncio.Queue's own (typeshed omits them)
        self._finished.clear()  # type: ignore[attr-defined]
        getters = self._getters
        while getters:
            getter = getters.pop(0)
            if not getter.done():  # a get that was cancelled takes nothing
                getter.set_result(item)
                break
        else:
            self._put(item)
        if not getters:
            self._getters = ()  # the line is made again by the next get that waits


class LeanFIFOLock:
    """Stands in for AgentChat's ``FIFOLock`` (0.7.5, pinned; the same order and hand-over; nothing
    checks its class): its waiting line is made when a second message first waits (an
    ``asyncio.Queue`` is four deques, ~2.5 KB), and it has two slots instead of a dict: a team's group
    chat manager and agent containers each hold one for every team a pipeline keeps."""

    __slots__ = ("_waiting", "_locked")

    def __init__(self) -> None:
        self._waiting: collections.deque[asyncio.Event] | None = None
        self._locked = False

    async def acquire(self) -> None:
        if not self._locked:
            self._locked = True
            return
        if self._waiting is None:
            self._waiting = collections.deque()
        event = asyncio.Event()
        self._waiting.append(event)
        await event.wait()

    def release(self) -> None:
        if self._waiting:
            self._waiting.popleft().set()  # the lock passes to the next in line
        else:
            self._locked = False
