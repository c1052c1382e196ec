"""The in-process back-end, for a single process (scripts, tests): ``memory://``."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Iterable, Sequence

from duet.agents.continuations._store import DEFAULT_TTL, Continuation, ContinuationStore


class MemoryContinuationStore(ContinuationStore):
    """For a single process (scripts, tests). O(1) per call: the TTL is the same for every entry,
    so entries expire in the order they were put; each put drops a few of the oldest expired ones."""

    _EXPIRE_PER_PUT = 64  # amortised: a long-idle store is emptied over several puts, never in one

    def __init__(self, ttl: float = DEFAULT_TTL) -> None:
        self._ttl = ttl
        self._entries: OrderedDict[str, tuple[float, Continuation]] = OrderedDict()  # oldest first

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        now = time.monotonic()
        entries = self._entries
        for _ in range(self._EXPIRE_PER_PUT):
            oldest = next(iter(entries), None)
            if oldest is None or entries[oldest][0] > now:
                break
            del entries[oldest]
        expires = now + self._ttl
        for call_id in call_ids:
            entries[call_id] = (expires, continuation)
            entries.move_to_end(call_id)  # a key put again expires last

    async def put_each(self, writes: Sequence[tuple[Sequence[str], Continuation]]) -> None:
        # In the process, no wait: a batch is one call of the store (GuardedStore bounds it as one).
        for call_ids, continuation in writes:
            await self.put(call_ids, continuation)

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        now = time.monotonic()
        for call_id in call_ids:
            entry = self._entries.get(call_id)
            if entry is not None and entry[0] > now:
                return entry[1]
        return None

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        now = time.monotonic()
        found: list[Continuation | None] = []
        for key in keys:
            entry = self._entries.get(key)
            found.append(entry[1] if entry is not None and entry[0] > now else None)
        return found

    def __str__(self) -> str:
        return "memory"
