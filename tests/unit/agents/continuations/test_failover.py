"""A guarded store whose back-end fails over: writes held in the worker (bounded) and written once the
back-end answers again, a follow-up's read waiting for it, and a wait that gives up saying so. The
back-end here is a memory store that refuses while it is "failing over"; the real Redis Sentinel
failover is in tests/http/test_sentinel_store.py."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Iterable, Sequence

import pytest

from duet.agents.continuations import Continuation, GuardedStore, MemoryContinuationStore, ReasoningLedger, StoreUnavailable
from duet.agents.continuations._failover import HeldWrites


class FailingOver(MemoryContinuationStore):
    """A memory store that refuses every call (ConnectionRefusedError) until ``back`` is set."""

    def __init__(self, *, fails_over: bool = True) -> None:
        super().__init__()
        self.back = asyncio.Event()
        self.back.set()
        self.refused = 0
        self.tried_again = asyncio.Event()  # refused a second time: the failover is being waited for
        self._fails_over = fails_over

    def _check(self) -> None:
        if not self.back.is_set():
            self.refused += 1
            if self.refused >= 2:
                self.tried_again.set()
            raise ConnectionRefusedError("the old primary is gone")

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        self._check()
        await super().put(call_ids, continuation)

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        self._check()
        return await super().get(call_ids)

    async def ping(self) -> None:
        self._check()

    def fails_over(self, error: BaseException) -> bool:
        return self._fails_over and isinstance(error, ConnectionError)


def round_(text: str) -> Continuation:
    return Continuation(reasoning=text)


def test_writes_during_a_failover_are_held_read_back_and_written_once_it_is_over() -> None:
    async def main() -> None:
        backend = FailingOver()
        store = GuardedStore(backend, timeout=1, failover_wait=10)
        backend.back.clear()
        await store.put(["a", "b"], round_("first"))  # meets the failover: held, not lost
        await store.put(["c"], round_("second"))  # the store is known to fail over: held at once
        assert not store.available
        assert (await store.get(["b"])).reasoning == "first"  # type: ignore[union-attr]  # this worker reads what it holds
        assert len(store._held) == 2
        backend.back.set()  # the new primary answers
        await asyncio.wait_for(store._failover.back(), 5)  # type: ignore[union-attr]
        assert store.available
        assert (await backend.get(["a"])).reasoning == "first"  # type: ignore[union-attr]
        assert (await backend.get(["c"])).reasoning == "second"  # type: ignore[union-attr]
        assert len(store._held) == 0

    asyncio.run(main())


def test_a_follow_up_read_waits_for_the_new_primary() -> None:
    async def main() -> None:
        backend = FailingOver()
        await backend.put(["kept"], round_("kept before the failover"))
        store = GuardedStore(backend, timeout=1, failover_wait=10)
        backend.back.clear()
        waiting = asyncio.ensure_future(store.get(["kept"], across_failover=True))
        await asyncio.wait_for(backend.tried_again.wait(), 5)  # the read met the failover; the store is tried again
        assert not waiting.done()
        with pytest.raises(StoreUnavailable):  # a read that need not wait (reasoning reuse, notes) does not
            await store.get(["kept"])
        backend.back.set()
        found = await asyncio.wait_for(waiting, 5)
        assert found is not None and found.reasoning == "kept before the failover"

    asyncio.run(main())


def test_a_wait_that_gives_up_says_so(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        backend = FailingOver()
        store = GuardedStore(backend, timeout=0.2, retry_interval=60, failover_wait=0.5)
        backend.back.clear()
        await store.put(["a"], round_("held"))
        with pytest.raises(StoreUnavailable):  # waited the whole bound, then the follow-up goes on without
            await asyncio.wait_for(store.get(["x"], across_failover=True), 5)
        with pytest.raises(StoreUnavailable):  # the wait is over: a write is refused, and the answer says so
            await store.put(["b"], round_("not held"))
        backend.back.set()
        assert await backend.get(["a"]) is None  # dropped when the wait was given up
        assert len(store._held) == 0

    with caplog.at_level(logging.WARNING, "duet.agents.continuations"):
        asyncio.run(main())
    messages = [record.getMessage() for record in caplog.records]
    assert any("is failing over" in m and "for up to 0.5 s" in m for m in messages), messages
    assert any("did not fail over within the wait (DUET_STORE_FAILOVER_WAIT): 1 write(s) held" in m for m in messages), messages


def test_a_write_that_cannot_be_held_is_refused() -> None:
    async def main() -> None:
        backend = FailingOver()
        store = GuardedStore(backend, timeout=1, failover_wait=10)
        store._held = HeldWrites(max_entries=2)
        backend.back.clear()
        await store.put(["a"], round_("1"))
        await store.put(["b"], round_("2"))
        with pytest.raises(StoreUnavailable, match="holds all the writes it can"):
            await store.put(["c"], round_("3"))
        backend.back.set()
        await asyncio.wait_for(store._failover.back(), 5)  # type: ignore[union-attr]
        assert [await backend.get([key]) is not None for key in "abc"] == [True, True, False]
        await store.close()

    asyncio.run(main())


def test_held_writes_are_bounded_in_bytes_too() -> None:
    held = HeldWrites(max_entries=100, max_bytes=200)
    assert held.hold(["a"], round_("x" * 50))
    assert not held.hold(["b"], round_("x" * 150))
    assert held.find(["b", "a"]) is not None and held.find_each(["a", "b"])[1] is None
    entry = held.first()
    assert entry is not None
    held.written(entry)
    assert len(held) == 0 and held.find(["a"]) is None


def test_a_store_that_does_not_fail_over_is_not_waited_for() -> None:
    async def main() -> None:
        backend = FailingOver(fails_over=False)
        store = GuardedStore(backend, timeout=1, failover_wait=10)
        backend.back.clear()
        with pytest.raises(StoreUnavailable):
            await store.put(["a"], round_("lost, and the answer says so"))
        with pytest.raises(StoreUnavailable):
            await store.get(["a"], across_failover=True)
        assert backend.refused == 1  # the second call failed at once: the outage is known

    asyncio.run(main())


def test_an_outage_that_begins_while_a_failover_still_writes_leaves_it_alone() -> None:
    """One task writes what the worker holds, in order: a new outage does not start a second."""

    async def main() -> None:
        backend = FailingOver()
        store = GuardedStore(backend, timeout=1, retry_interval=0, failover_wait=10)
        backend.back.clear()
        await store.put(["a"], round_("held"))
        failover = store._failover
        assert failover is not None and failover.active
        backend.back.set()
        assert await store.get(["x"]) is None  # a call that succeeds ends the outage (as a probe does)...
        backend.back.clear()
        with pytest.raises(StoreUnavailable):  # ... and the next failure begins another, while the first still runs
            await store.get(["x"])
        assert store._failover is failover
        backend.back.set()
        assert await asyncio.wait_for(failover.back(), 5)
        assert (await backend.get(["a"])).reasoning == "held"  # type: ignore[union-attr]

    asyncio.run(main())


def test_writes_in_one_call_during_a_failover_are_each_held() -> None:
    async def main() -> None:
        backend = FailingOver()
        store = GuardedStore(backend, timeout=1, failover_wait=10)
        backend.back.clear()
        await store.put_each([(["a"], round_("first")), (["b", "c"], round_("second"))])  # meets the failover
        assert len(store._held) == 2
        assert (await store.get(["c"])).reasoning == "second"  # type: ignore[union-attr]
        await store.put_each([(["d"], round_("third"))])  # known to fail over: held at once
        assert len(store._held) == 3
        backend.back.set()
        await asyncio.wait_for(store._failover.back(), 5)  # type: ignore[union-attr]
        assert (await backend.get(["b"])).reasoning == "second"  # type: ignore[union-attr]
        assert (await backend.get(["d"])).reasoning == "third"  # type: ignore[union-attr]

    asyncio.run(main())


def test_notes_held_during_a_failover_are_read_back_in_this_worker() -> None:
    """The reasoning ledger's notes written while the store fails over are held here; the next turn's
    prompt still gets them (and a read of several keys gets what is held, the rest missing)."""

    async def main() -> None:
        backend = FailingOver()
        store = GuardedStore(backend, timeout=1, failover_wait=10)
        ledger = ReasoningLedger(store, write_delay=0.01)
        backend.back.clear()
        ledger.keep("owner", "duet", "digest-1", "reasoning 1", reuse_seconds=0, prefix_digest="prefix-1")
        await ledger.settle()
        assert store.held_writes == 1 and not store.available
        assert await ledger.notes("owner", "duet", {0: "prefix-1", 1: "prefix-2"}) == {0: ("reasoning 1", "")}
        held_key = ReasoningLedger.note_key("owner", "duet", "prefix-1")
        found = await store.get_each([held_key, "not-held"])
        assert [entry and entry.reasoning for entry in found] == ["reasoning 1", None]

    asyncio.run(main())


class HangsWhileFailingOver(FailingOver):
    """Refuses writes while failing over (they are held), and hangs on reads (an old primary black-holed)."""

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        if not self.back.is_set():
            await asyncio.sleep(60)
        return await super().get(call_ids)

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        if not self.back.is_set():
            await asyncio.sleep(60)
        return await super().get_each(keys)


def test_held_notes_are_read_back_without_a_store_call_while_it_fails_over() -> None:
    """A request's notes are read on its way to the first token: while the store fails over, they come
    from what this worker holds, the rest missing, without a probe that could wait the store's timeout."""

    async def main() -> float:
        backend = HangsWhileFailingOver()
        store = GuardedStore(backend, timeout=1.0, retry_interval=0.0, failover_wait=10)
        ledger = ReasoningLedger(store, write_delay=0.01)
        backend.back.clear()
        ledger.keep("owner", "duet", "digest-1", "reasoning 1", reuse_seconds=0, prefix_digest="prefix-1")
        await ledger.settle()
        assert store.held_writes == 1 and not store.available
        started = time.monotonic()
        assert await ledger.notes("owner", "duet", {0: "prefix-1", 1: "prefix-2"}) == {0: ("reasoning 1", "")}
        took = time.monotonic() - started
        await store.close()
        return took

    assert asyncio.run(main()) < 0.5
