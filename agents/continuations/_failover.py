"""What a guarded store does while its back-end fails over (Redis Sentinel promoting a replica): the
writes it holds meanwhile (:class:`HeldWrites`, bounded in entries and bytes) and the one task per
worker and failover that waits for the new primary and then writes them (:class:`Failover`)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from duet.agents.continuations._store import Continuation, ContinuationStore

logger = logging.getLogger("duet.agents.continuations")

MAX_HELD_WRITES = 1000  # rounds held in one worker while its store fails over
MAX_HELD_BYTES = 16 * 1024 * 1024  # their serialised size
FAILOVER_POLL = 0.2  # seconds between two tries of a store that fails over
SETTLE = 0.5
"""Seconds a follow-up that waited for the new primary and found nothing waits before it looks again:
the round may be held by another worker, which writes it once it finds the new primary too."""


@dataclass
class HeldWrite:
    keys: list[str]
    continuation: Continuation
    size: int


class HeldWrites:
    """Writes waiting for the store, in order, each readable by its keys until it is written."""

    def __init__(self, max_entries: int = MAX_HELD_WRITES, max_bytes: int = MAX_HELD_BYTES) -> None:
        self._entries: deque[HeldWrite] = deque()
        self._by_key: dict[str, Continuation] = {}
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self.dropped = 0
        """Writes held, then dropped (the wait ran out, or the worker stopped), since the start: a metric reads it."""

    def __len__(self) -> int:
        return len(self._entries)

    def hold(self, keys: Sequence[str], continuation: Continuation) -> bool:
        """False when the bound (entries or bytes) leaves no room: the write is not held."""
        size = len(continuation.model_dump_json())
        if len(self._entries) >= self._max_entries or self._bytes + size > self._max_bytes:
            return False
        self._entries.append(HeldWrite(list(keys), continuation, size))
        self._by_key.update(dict.fromkeys(keys, continuation))
        self._bytes += size
        return True

    def find(self, keys: Sequence[str]) -> Continuation | None:
        """What is held under the first of ``keys`` that has something, as the store's ``get`` answers."""
        if not self._by_key:
            return None
        return next((self._by_key[key] for key in keys if key in self._by_key), None)

    def find_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        return [self._by_key.get(key) for key in keys]

    def first(self) -> HeldWrite | None:
        return self._entries[0] if self._entries else None

    def written(self, entry: HeldWrite) -> None:
        """``entry`` (the first) is in the store now: it is read from there."""
        if not self._entries or self._entries[0] is not entry:  # dropped meanwhile
            return
        self._entries.popleft()
        self._bytes -= entry.size
        for key in entry.keys:
            if self._by_key.get(key) is entry.continuation:  # a later write of the same key stays held
                del self._by_key[key]

    def drop(self) -> int:
        """Forgets every held write; how many there were."""
        count = len(self._entries)
        self.dropped += count
        self._entries.clear()
        self._by_key.clear()
        self._bytes = 0
        return count


class Failover:
    """One failover of a store as one worker lives it: from the call that met it, the store is tried
    every :data:`FAILOVER_POLL` seconds until it answers or ``until`` (monotonic) has passed; then the
    writes held meanwhile are written in order, or, the wait over, dropped (one warning)."""

    def __init__(self, store: ContinuationStore, held: HeldWrites, *, timeout: float, until: float,
                 recovered: Callable[[], None]) -> None:
        self._store = store
        self._held = held
        self._timeout = timeout
        self._until = until
        self._recovered = recovered
        # Not a request's task: a fresh context, so no run (nor its cancellation) is attached to it.
        self._task = asyncio.get_running_loop().create_task(self._run(), context=contextvars.Context())

    @property
    def active(self) -> bool:
        return not self._task.done()

    async def back(self) -> bool:
        """Waits (at most until the failover's bound) for the store to answer and the held writes to be
        written; False when the wait was given up. A caller that leaves does not stop the failover."""
        return await asyncio.shield(self._task)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> bool:
        answered = False
        while True:
            try:
                if not answered:
                    async with asyncio.timeout(self._timeout):
                        await self._store.ping()
                    answered = True
                    self._recovered()
                await self._write_held()
                return True
            except Exception:  # noqa: BLE001 - any fault: the new primary is not there yet
                if time.monotonic() + FAILOVER_POLL > self._until:
                    self._give_up()
                    return False
            await asyncio.sleep(FAILOVER_POLL)

    async def _write_held(self) -> None:
        while (entry := self._held.first()) is not None:  # writes held while this one runs are written too
            async with asyncio.timeout(self._timeout):
                await self._store.put(entry.keys, entry.continuation)
            self._held.written(entry)

    def _give_up(self) -> None:
        dropped = self._held.drop()
        logger.warning("continuation store %s did not fail over within the wait (DUET_STORE_FAILOVER_WAIT): "
                       "%d write(s) held meanwhile are not kept; the follow-ups of their tool rounds go on without "
                       "the hidden part", self._store, dropped)
