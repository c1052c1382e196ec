"""The guarded store (:mod:`duet.agents.continuations._guarded`): each call of a back-end bounded by its timeout."""

from __future__ import annotations

import asyncio
from typing import Iterable, Sequence

from duet.agents.continuations import Continuation, ContinuationStore, GuardedStore


class PutOnly(ContinuationStore):
    """A back-end of a user's that writes and reads one continuation per call (no ``put_each`` or ``get_each``), each
    well within the guard's timeout."""

    def __init__(self) -> None:
        self.kept: dict[str, Continuation] = {}

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        await asyncio.sleep(0.03)  # a round trip
        self.kept.update(dict.fromkeys(call_ids, continuation))

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        await asyncio.sleep(0.03)  # a round trip
        return next((self.kept[call_id] for call_id in call_ids if call_id in self.kept), None)


def test_a_batch_of_writes_to_a_back_end_without_put_each_is_timed_per_write() -> None:
    """The reasoning ledger writes what requests kept within 50 ms in one ``put_each`` (issue 28): for a
    back-end that writes one by one, each write gets the guard's timeout, as each did when written alone;
    a batch that takes longer in all is no outage."""

    async def main() -> tuple[bool, list[Continuation | None]]:
        store = GuardedStore(PutOnly(), timeout=0.25)
        writes = [([f"key-{n}"], Continuation(reasoning=f"thought {n}")) for n in range(20)]  # ~0.6 s in all
        await store.put_each(writes)
        return store.available, await store.get_each([f"key-{n}" for n in range(20)])

    available, found = asyncio.run(main())
    assert available
    assert [entry and entry.reasoning for entry in found] == [f"thought {n}" for n in range(20)]


def test_a_batch_of_reads_from_a_back_end_without_get_each_is_timed_per_read() -> None:
    """The notes of a conversation's earlier turns are read in one ``get_each``: for a back-end that reads
    one by one, each read gets the guard's timeout, as each did when read alone."""

    async def main() -> tuple[bool, list[Continuation | None]]:
        backend = PutOnly()
        backend.kept = {f"key-{n}": Continuation(reasoning=f"thought {n}") for n in range(20)}
        store = GuardedStore(backend, timeout=0.25)
        found = await store.get_each([f"key-{n}" for n in range(20)] + ["missing"])  # ~0.6 s in all
        return store.available, found

    available, found = asyncio.run(main())
    assert available
    assert [entry and entry.reasoning for entry in found] == [f"thought {n}" for n in range(20)] + [None]


class StoreCalls:
    """A request's observer that notes its store calls (the rest of the protocol unused here)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def store_call(self, operation: str, outcome: str, seconds: float) -> None:
        self.calls.append((operation, outcome))


def test_a_batch_of_reads_from_a_back_end_without_get_each_is_told_as_one_store_call() -> None:
    """A request's observer hears of a batched read once, as ``get_each``: its misses are no follow-up's."""
    from duet.agents._run import DuetRun, bind_run

    async def main() -> list[tuple[str, str]]:
        backend = PutOnly()
        backend.kept = {"key-1": Continuation(reasoning="thought")}
        store = GuardedStore(backend, timeout=0.25)
        observer = StoreCalls()
        with bind_run(DuetRun(emit=lambda event: True, workbench=None, observer=observer)):  # type: ignore[arg-type]  # only its store calls are told
            found = await store.get_each(["key-1", "missing"])
        assert [entry and entry.reasoning for entry in found] == ["thought", None]
        return observer.calls

    assert asyncio.run(main()) == [("get_each", "ok")]
