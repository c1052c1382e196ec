"""The runtime's queues (``agents/runtime/_queues.py``): a hand-over queue gives futures, not tasks; a
lightened queue holds two deques fewer and still joins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from duet.agents.runtime import HandOverQueue


def test_a_hand_over_queue_gives_futures_not_tasks() -> None:
    """A team's output queue: each message AgentChat waits for costs a future, not a task; items come
    out in order whether the get or the put comes first, and a cancelled get takes nothing."""

    async def main() -> list[Any]:
        queue = HandOverQueue()
        waiting = asyncio.ensure_future(queue.get())  # as AgentChat's run_stream waits
        assert not isinstance(waiting, asyncio.Task)
        cancelled = queue.get()
        await queue.put("first")
        cancelled.cancel()  # the second get gives up before anything is there for it
        later = queue.get()
        queue.put_nowait("second")
        queue.put_nowait("third")
        return [await waiting, cancelled.cancelled(), await later, await queue.get(), queue.empty()]

    assert asyncio.run(main()) == ["first", True, "second", "third", True]


@pytest.mark.parametrize("kind", ["asyncio", "autogen_core"])
def test_a_lightened_queue_holds_two_deques_fewer_and_still_joins(kind: str) -> None:
    """Unbounded: no putters' line, and the join event's waiting list only once ``join()`` waits;
    puts, gets, ``task_done`` and a waiting ``join()`` behave as before. A bounded queue is left as it is."""
    import collections

    from autogen_core._queue import Queue as AutogenQueue
    from duet.agents.runtime import lighten_queue

    make = asyncio.Queue if kind == "asyncio" else AutogenQueue

    async def run() -> list[str]:
        queue = lighten_queue(make())
        assert queue._putters == () and queue._finished._waiters == ()
        done: list[str] = []
        for item in ("a", "b"):
            await queue.put(item)
        joined = asyncio.ensure_future(queue.join())
        await asyncio.sleep(0)
        assert not joined.done() and len(queue._finished._waiters) == 1
        while not queue.empty():
            done.append(await queue.get())
            queue.task_done()
        await asyncio.wait_for(joined, 1)
        await asyncio.wait_for(queue.join(), 1)  # set: returns at once
        bounded = make(maxsize=1)
        assert lighten_queue(bounded)._putters == collections.deque() and type(bounded._finished) is asyncio.Event
        return done

    assert asyncio.run(run()) == ["a", "b"]
