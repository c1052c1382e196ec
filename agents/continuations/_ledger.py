"""Reasoning already paid for (:class:`ReasoningLedger`): a retry of the same request reuses it.

The reasoner is the expensive, slow half of a request. When a request fails after its reasoning was
produced (the answer model's 429 or 5xx, a hang-up), or succeeds and its client retries anyway, the
retry asks the reasoner the very same question. The ledger keeps each completed reasoning under a
digest of the reasoner's request (its model, its prompt, the effort in force), in the owner's part
of the continuation store (shared by workers and replicas) with an in-process LRU in front of it,
for ``reuse_seconds``. Bounded in entries, bytes and time; never shared across owners (API keys);
a store outage costs the reuse, never the request.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import time
from collections import OrderedDict
from typing import Any, Mapping, Sequence

from autogen_core.models import LLMMessage

from duet.agents.continuations._store import Continuation, ContinuationStore, StoreUnavailable, owned

logger = logging.getLogger("duet.agents.continuations")

DEFAULT_REUSE_SECONDS = 600.0
"""How long a completed reasoning is reused by a retry of the same request (0: never)."""

MAX_LOCAL_ENTRIES = 1024
MAX_LOCAL_CHARS = 16 * 1024 * 1024
MAX_ENTRY_CHARS = 256 * 1024
"""A reasoning longer than this is not kept (the reasoner's own limit, max_reasoning_chars, is far below)."""
MAX_PENDING_PUTS = 256
"""Reasoning waiting to be written to the store at most; more is not kept there (the reuse is an
optimisation, never a queue)."""
WRITE_DELAY = 0.05
"""Seconds the ledger gathers completed reasoning before it writes it to the store, all in one call."""


def prefix_digests(conversation: Sequence[LLMMessage], user_type: type | tuple[type, ...]) -> dict[int, str]:
    """The digest of each prefix of ``conversation`` that ends with a message of ``user_type`` (a type or
    a tuple of types), by that message's index: one pass (each digest continues the last).

    >>> from autogen_core.models import AssistantMessage, UserMessage
    >>> turns = [UserMessage(content="Hi", source="user"), AssistantMessage(content="Hello", source="a"),
    ...          UserMessage(content="Bye", source="user")]
    >>> digests = prefix_digests(turns, UserMessage)
    >>> sorted(digests), digests[0] == fingerprint(turns[:1]), digests[2] == fingerprint(turns)
    ([0, 2], True, True)
    """
    digest = hashlib.sha256()
    found: dict[int, str] = {}
    for index, message in enumerate(conversation):
        _add(digest, message)
        if isinstance(message, user_type):
            found[index] = digest.copy().hexdigest()
    return found


def _add(digest: Any, message: LLMMessage) -> None:
    digest.update(type(message).__name__.encode())
    digest.update(b"\x00")
    digest.update(str(message.content).encode("utf-8", "surrogatepass"))
    digest.update(b"\x01")


def fingerprint(messages: Sequence[LLMMessage], *extra: object) -> str:
    """A SHA-256 digest of a prompt (each message's kind and content) and ``extra`` values.

    >>> from autogen_core.models import UserMessage
    >>> fingerprint([UserMessage(content="Hi", source="user")]) == fingerprint([UserMessage(content="Hi", source="u")])
    True
    """
    digest = hashlib.sha256()
    for message in messages:
        _add(digest, message)
    if not extra:
        return digest.hexdigest()
    for value in extra:
        digest.update(repr(value).encode("utf-8", "surrogatepass"))
        digest.update(b"\x02")
    return digest.hexdigest()


class ReasoningLedger:
    """Completed reasoning, by the digest of the request that produced it. One per pipeline; the
    reasoning agent asks it (:meth:`find`) before calling its model and tells it (:meth:`keep`) once
    its reasoning is complete.

    >>> import asyncio
    >>> from duet.agents.continuations import MemoryContinuationStore
    >>> ledger = ReasoningLedger(MemoryContinuationStore())
    >>> async def kept_then_found(owner):
    ...     ledger.keep("key-owner", "duet", "digest", "Think twice.", reuse_seconds=60)
    ...     await ledger.settle()
    ...     found = await ledger.find(owner, "duet", "digest")
    ...     return found and found.reasoning
    >>> asyncio.run(kept_then_found("key-owner")), asyncio.run(kept_then_found("another-owner"))
    ('Think twice.', None)
    """

    def __init__(self, store: ContinuationStore, *, reuse_seconds: float | None = None, max_entries: int = MAX_LOCAL_ENTRIES,
                 max_chars: int = MAX_LOCAL_CHARS, write_delay: float = WRITE_DELAY) -> None:
        """``reuse_seconds``, when given, overrides every reasoner's own ``reuse_seconds`` (0: no reuse at all)."""
        self.store = store
        self.reuse_override = reuse_seconds
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._local: OrderedDict[str, tuple[float, Continuation, int]] = OrderedDict()  # newest last
        self._chars = 0
        self._unwritten: dict[str, Continuation] = {}  # kept, not in the store yet: read here meanwhile
        self._queued: list[tuple[list[str], Continuation]] = []  # the next write's
        self._writing = 0  # entries of the write under way
        self._writer: asyncio.Task[None] | None = None
        self._write_delay = write_delay

    def window(self, configured: float) -> float:
        """Seconds a reasoner configured with ``configured`` reuses its reasoning (the override wins)."""
        return configured if self.reuse_override is None else self.reuse_override

    @staticmethod
    def key(owner: str, pipeline: str, digest: str) -> str:
        return owned(owner, f"{pipeline}:reasoning:{digest}")

    async def find(self, owner: str, pipeline: str, digest: str) -> Continuation | None:
        """The reasoning kept for this request and still reusable, or ``None``."""
        key = self.key(owner, pipeline, digest)
        entry = self._local.get(key)
        now = time.time()
        if entry is not None:
            if entry[0] > now:
                self._local.move_to_end(key)
                return entry[1]
            self._drop(key)
        if not self.store.available:  # known to be out: no probe on the reasoner's path
            return None
        try:
            stored = await self.store.get([key])
        except StoreUnavailable:  # the store reports its outage itself: the reasoner thinks again
            return None
        if stored is None or stored.reuse_until <= now:
            return None
        self._remember(key, stored)
        return stored

    @staticmethod
    def note_key(owner: str, pipeline: str, prefix_digest: str) -> str:
        return owned(owner, f"{pipeline}:note:{prefix_digest}")

    def keep(self, owner: str, pipeline: str, digest: str, reasoning: str, grounding: str = "", *,
             reuse_seconds: float, prefix_digest: str | None = None) -> None:
        """Keeps a completed reasoning: for its retries for ``reuse_seconds`` (here at once, in the store
        in the background: a write never delays the answer, and a client that leaves does not cancel
        it), and, given the ``prefix_digest`` of the conversation it was made for (ending with the user
        turn it answers), as that turn's note for the next turns' prompts (:meth:`notes`)."""
        if len(reasoning) + len(grounding) > MAX_ENTRY_CHARS or not (reasoning or grounding):
            return
        keys: list[str] = []
        until = 0.0
        if reuse_seconds > 0:
            until = time.time() + reuse_seconds
            keys.append(self.key(owner, pipeline, digest))
        if prefix_digest is not None:
            keys.append(self.note_key(owner, pipeline, prefix_digest))
        if not keys:
            return
        entry = Continuation(reasoning=reasoning, grounding=grounding, reuse_until=until)
        if until:
            self._remember(keys[0], entry)
        if len(self._queued) + self._writing >= MAX_PENDING_PUTS:
            return
        self._queued.append((keys, entry))
        for key in keys:
            self._unwritten[key] = entry
        if self._writer is None:
            # Not the request's store call (its observer is not told): a task of its own, outside the run's context.
            self._writer = asyncio.get_running_loop().create_task(self._write_queued(), context=contextvars.Context())

    async def notes(self, owner: str, pipeline: str, prefix_digests: Mapping[int, str]) -> dict[int, tuple[str, str]]:
        """The notes (reasoning, retrieved context) kept for these conversation prefixes, in one store
        call: by the same index as given (those this worker has not written yet, from here). A note the
        store lost (expired, an outage) is only missing."""
        keys = {index: self.note_key(owner, pipeline, prefix_digests[index]) for index in prefix_digests}
        notes = {index: entry for index, key in keys.items() if (entry := self._unwritten.get(key)) is not None}
        unread = [index for index in keys if index not in notes]
        # Known to be out: the rest are missing, no store call; what it holds through a failover is read back.
        if unread and (self.store.available or self.store.held_writes):
            try:
                found = await self.store.get_each([keys[index] for index in unread])
            except StoreUnavailable:
                found = [None] * len(unread)
            notes.update((index, entry) for index, entry in zip(unread, found, strict=True) if entry is not None)
        return {index: (entry.reasoning, entry.grounding) for index, entry in notes.items()}

    async def _write_queued(self) -> None:
        """Writes what was kept in the last ``write_delay`` seconds in one store call, until nothing is
        left: one hand-off to the store (its thread, its server) for many requests, not one each."""
        try:
            while self._queued:
                await asyncio.sleep(self._write_delay)
                writes, self._queued = self._queued, []
                self._writing = len(writes)
                try:
                    await self.store.put_each(writes)
                except StoreUnavailable:  # reported by the store: only the reuse by another worker is lost
                    pass
                except Exception:
                    logger.warning("could not keep %d reasoning(s) for reuse", len(writes), exc_info=True)
                finally:
                    self._writing = 0
                    self._forget_written(writes)
        finally:
            self._writer = None

    def _forget_written(self, writes: list[tuple[list[str], Continuation]]) -> None:
        unwritten = self._unwritten
        for keys, entry in writes:
            for key in keys:
                if unwritten.get(key) is entry:  # (a later one under the same key waits for its own write)
                    del unwritten[key]

    async def settle(self, timeout: float = 2.0) -> None:
        """Waits (at most ``timeout`` seconds) for what was kept to be written (at shutdown)."""
        if self._writer is not None:
            await asyncio.wait({self._writer}, timeout=timeout)

    def _remember(self, key: str, entry: Continuation) -> None:
        size = len(entry.reasoning) + len(entry.grounding)
        if key in self._local:
            self._drop(key)
        self._local[key] = (entry.reuse_until, entry, size)
        self._chars += size
        while self._local and (len(self._local) > self._max_entries or self._chars > self._max_chars):
            self._drop(next(iter(self._local)))

    def _drop(self, key: str) -> None:
        _, _, size = self._local.pop(key)
        self._chars -= size

    def __len__(self) -> int:
        return len(self._local)

    def stats(self) -> dict[str, Any]:
        return {"entries": len(self._local), "chars": self._chars, "pending": len(self._queued) + self._writing}
