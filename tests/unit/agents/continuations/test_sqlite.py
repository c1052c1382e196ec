"""The SQLite back-end's thread (``agents/continuations/_sqlite.py``): calls in order, results and errors
handed back to the awaiting task, a call whose caller gave up before its turn not run."""

from __future__ import annotations

import asyncio
import threading

import pytest

from duet.agents.continuations._sqlite import StoreThread


def test_calls_run_in_order_on_the_thread_and_hand_back_results_and_errors() -> None:
    thread = StoreThread("test-store")
    ran: list[str] = []

    def record(name: str) -> str:
        ran.append(name)
        return threading.current_thread().name

    def fail() -> None:
        raise ValueError("disk on fire")

    async def main() -> None:
        thread.submit(record, "queued first")
        assert await thread.call(record, "awaited") == "test-store"
        with pytest.raises(ValueError, match="disk on fire"):
            await thread.call(fail)

    asyncio.run(main())
    assert ran == ["queued first", "awaited"]
    thread.close()
    with pytest.raises(RuntimeError, match="closed"):
        thread.submit(record, "after close")


def test_a_call_whose_caller_gave_up_before_its_turn_is_not_run() -> None:
    thread = StoreThread("test-store")
    gate = threading.Event()
    ran: list[str] = []

    async def main() -> None:
        blocker = thread.call(gate.wait, 5)
        late = thread.call(ran.append, "late")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await late  # the store's guard gives up on a call stuck behind another
        gate.set()
        assert await blocker is True
        await thread.call(ran.append, "next")  # the thread goes on with the calls after it

    asyncio.run(main())
    thread.close()
    assert ran == ["next"]
