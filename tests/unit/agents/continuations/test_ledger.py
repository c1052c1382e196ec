"""The reasoning ledger's writes (``agents/continuations/_ledger.py``): what requests keep is gathered and
written to the store in one call, read back from the worker before it is written, bounded, and a failed
write loses only the reuse by another worker."""

from __future__ import annotations

import asyncio
import logging
from typing import Sequence

import pytest

from duet.agents.continuations import Continuation, MemoryContinuationStore, ReasoningLedger, SQLiteContinuationStore
from duet.agents.continuations import _ledger


class CountingStore(MemoryContinuationStore):
    """A memory store that counts its calls; ``refuse`` makes its writes fail."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[int] = []  # entries per put_each call
        self.reads = 0
        self.refuse = False

    async def put_each(self, writes: Sequence[tuple[Sequence[str], Continuation]]) -> None:
        self.writes.append(len(writes))
        if self.refuse:
            raise OSError("disk full")
        await super().put_each(writes)

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        self.reads += 1
        return await super().get_each(keys)


def keep(ledger: ReasoningLedger, index: int) -> None:
    ledger.keep("owner", "duet", f"digest-{index}", f"reasoning {index}", reuse_seconds=60, prefix_digest=f"prefix-{index}")


def test_what_requests_keep_meanwhile_is_written_in_one_store_call() -> None:
    async def main() -> None:
        store = CountingStore()
        ledger = ReasoningLedger(store, write_delay=0.05)
        for index in range(10):
            keep(ledger, index)
        assert store.writes == []  # nothing yet: gathered for write_delay
        await ledger.settle()
        assert store.writes == [10]
        for index in range(10):
            found = await store.get([ReasoningLedger.key("owner", "duet", f"digest-{index}")])
            assert found is not None and found.reasoning == f"reasoning {index}"
        keep(ledger, 10)  # a later one: a write of its own
        await ledger.settle()
        assert store.writes == [10, 1]
        assert ledger.stats()["pending"] == 0

    asyncio.run(main())


def test_a_note_not_written_yet_is_read_from_the_worker() -> None:
    async def main() -> None:
        store = CountingStore()
        ledger = ReasoningLedger(store, write_delay=10)  # not written during this test
        keep(ledger, 1)
        notes = await ledger.notes("owner", "duet", {0: "prefix-1"})
        assert notes == {0: ("reasoning 1", "")}
        assert store.reads == 0  # all of them were here: no store call
        notes = await ledger.notes("owner", "duet", {0: "prefix-1", 2: "prefix-2"})
        assert notes == {0: ("reasoning 1", "")}
        assert store.reads == 1  # the one not here was looked for in the store

    asyncio.run(main())


def test_a_failed_write_is_logged_and_later_ones_go_on(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        store = CountingStore()
        ledger = ReasoningLedger(store, write_delay=0.01)
        store.refuse = True
        keep(ledger, 1)
        await ledger.settle()
        assert "could not keep 1 reasoning(s) for reuse" in caplog.text
        assert ledger._unwritten == {}  # not held on to after its write failed
        store.refuse = False
        keep(ledger, 2)
        await ledger.settle()
        assert store.writes == [1, 1]
        assert await store.get([ReasoningLedger.note_key("owner", "duet", "prefix-2")]) is not None

    with caplog.at_level(logging.WARNING, logger="duet.agents.continuations"):
        asyncio.run(main())


def test_what_waits_to_be_written_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ledger, "MAX_PENDING_PUTS", 3)

    async def main() -> None:
        store = CountingStore()
        ledger = ReasoningLedger(store, write_delay=0.01)
        for index in range(5):
            keep(ledger, index)
        assert ledger.stats()["pending"] == 3
        await ledger.settle()
        assert store.writes == [3]
        assert await ledger.find("owner", "duet", "digest-4") is not None  # the retry's reuse in this worker stays

    asyncio.run(main())


def test_sqlite_writes_them_all_in_one_call_of_its_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        store = SQLiteContinuationStore(tmp_path / "s.db")
        calls: list[str] = []
        call = store._thread.call

        def counted(function, *args):  # type: ignore[no-untyped-def]
            calls.append(function.__name__)
            return call(function, *args)

        store._thread.call = counted  # type: ignore[method-assign]
        await store.put_each([(["a", "b"], Continuation(reasoning="one")), (["c"], Continuation(reasoning="two"))])
        assert calls == ["_put_each"]
        assert (await store.get(["b"])).reasoning == "one"  # type: ignore[union-attr]
        assert (await store.get(["c"])).reasoning == "two"  # type: ignore[union-attr]
        await store.close()

    asyncio.run(main())
