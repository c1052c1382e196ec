"""The SQLite back-end (``agents/continuations/_sqlite.py``): its thread (calls in order, results and errors
handed back to the awaiting task, a call whose caller gave up before its turn not run), and a put under
several keys written in one transaction."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

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


def test_a_put_under_several_keys_is_one_transaction(tmp_path: Path) -> None:
    """A round (or a reasoning) kept under several keys is written all or none, with one commit: a key the
    file refuses (a trigger here) leaves none of the others behind, and the store takes the next put."""
    import sqlite3

    from duet.agents.continuations import Continuation
    from duet.agents.continuations._sqlite import SQLiteContinuationStore

    with sqlite3.connect(tmp_path / "s.db") as setup:
        setup.execute("CREATE TABLE continuations (call_id TEXT PRIMARY KEY, payload TEXT NOT NULL, expires_at REAL NOT NULL)")
        setup.execute("CREATE TRIGGER refuse BEFORE INSERT ON continuations WHEN NEW.call_id = 'refused' "
                      "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    setup.close()
    kept = Continuation(reasoning="why")

    async def main() -> None:
        store = SQLiteContinuationStore(tmp_path / "s.db")
        commits: list[str] = []
        store._connection.set_trace_callback(lambda statement: commits.append(statement) if statement == "COMMIT" else None)
        with pytest.raises(sqlite3.IntegrityError, match="refused"):
            await store.put(["first", "refused", "third"], kept)
        assert await store.get(["first"]) is None and await store.get(["third"]) is None
        await store.put(["a", "b", "c"], kept)
        assert [await store.get([key]) for key in "abc"] == [kept, kept, kept] and commits == ["COMMIT"]
        await store.close()

    asyncio.run(main())
