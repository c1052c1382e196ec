"""Any back-end, guarded: every call bounded by a timeout, every fault a :class:`StoreUnavailable`
reported once per outage, and :func:`open_store`, which opens a back-end by URL and guards it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Iterable, Sequence, TypeVar
from urllib.parse import urlsplit

from duet.agents._observe import StoreOutcome, observer_of
from duet.agents._run import current_run
from duet.agents.continuations._failover import SETTLE, Failover, HeldWrites
from duet.agents.continuations._memory import MemoryContinuationStore
from duet.agents.continuations._redis import REDIS_SCHEMES, SENTINEL_SCHEMES, RedisContinuationStore, SentinelURL, redacted_url
from duet.agents.continuations._sqlite import SQLiteContinuationStore
from duet.agents.continuations._store import (
    DEFAULT_FAILOVER_WAIT,
    DEFAULT_STORE_TIMEOUT,
    DEFAULT_TTL,
    Continuation,
    ContinuationStore,
    StoreUnavailable,
)

logger = logging.getLogger("duet.agents.continuations")

RETRY_INTERVAL = 1.0  # seconds a store that failed is left alone before a call tries it again
_T = TypeVar("_T")


class GuardedStore(ContinuationStore):
    """Another store, with every call bounded by ``timeout`` seconds and every fault turned into
    :class:`StoreUnavailable`.

    An outage is logged once, as one warning naming the store and the first error, and its end as
    one info line. While the store is out, calls fail at once, but one every ``retry_interval``
    seconds goes through to try it: a hung store costs a request its timeout now and then, not
    every request every time.

    A back-end that fails over (Redis Sentinel, :meth:`ContinuationStore.fails_over`) is waited for,
    up to ``failover_wait`` seconds from the first failure: meanwhile writes are held in this worker
    (bounded, :class:`~duet.agents.continuations._failover.HeldWrites`; answered from there) and written
    once the new primary answers, and a follow-up's read (``get(..., across_failover=True)``) waits for
    it; a write that cannot be held, and every call once the wait is over, fail as above.
    """

    def __init__(self, store: ContinuationStore, timeout: float = DEFAULT_STORE_TIMEOUT, retry_interval: float = RETRY_INTERVAL,
                 failover_wait: float = DEFAULT_FAILOVER_WAIT) -> None:
        self.store = store
        self._timeout = timeout
        self._retry_interval = retry_interval
        self._failover_wait = failover_wait
        self._down_since: float | None = None  # monotonic time of the first failure of this outage
        self._retry_at = 0.0
        self._probing = False
        self._held = HeldWrites()
        self._failover: Failover | None = None

    @property
    def available(self) -> bool:
        """False from a failed call until the next call that succeeds."""
        return self._down_since is None

    @property
    def held_writes(self) -> int:
        """Writes held in this worker while its store fails over."""
        return len(self._held)

    @property
    def dropped_writes(self) -> int:
        """Writes held during a failover and then dropped (the wait ran out, or the worker stopped), in all."""
        return self._held.dropped

    async def _guard(self, call: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        return await self._told(call.__name__, self._guarded(call, *args))

    async def _told(self, operation: str, work: Awaitable[_T]) -> _T:
        """``work``'s result; a request's store calls are told to its observer, as ``operation``."""
        observer = observer_of(current_run())
        if observer is None:
            return await work
        started = time.monotonic()
        outcome: StoreOutcome = "cancelled"
        try:
            result = await work
            outcome = "miss" if result is None and operation == "get" else "ok"
            return result
        except StoreUnavailable:
            outcome = "unavailable"
            raise
        finally:
            observer.store_call(operation, outcome, time.monotonic() - started)

    async def _guarded(self, call: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        probe = False
        if self._down_since is not None:
            if self._probing or time.monotonic() < self._retry_at:
                raise StoreUnavailable(f"the continuation store {self.store} is unavailable")
            self._probing = probe = True
        try:
            async with asyncio.timeout(self._timeout):
                result = await call(*args)
        except Exception as exc:  # noqa: BLE001 - any fault of the store degrades the round the same way
            reason = f"no answer within {self._timeout:g} s" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            fails_over = self._failover_wait > 0 and self.store.fails_over(exc)
        else:
            self._recovered()
            return result
        finally:
            if probe:
                self._probing = False
        # Raised outside the except block: nothing of the failed call (frames, its exception) stays attached.
        self._retry_at = time.monotonic() + self._retry_interval
        if self._down_since is None:
            self._begin_outage(reason, fails_over)
        raise StoreUnavailable(f"the continuation store {self.store} is unavailable: {reason}")

    def _begin_outage(self, reason: str, fails_over: bool) -> None:
        self._down_since = time.monotonic()
        if not fails_over:
            logger.warning("continuation store %s is unavailable (%s): tool rounds go on without their hidden part "
                           "until it answers again", self.store, reason)
            return
        if not self._failing_over():  # one that is still writing what it held goes on (it alone writes them)
            self._failover = Failover(self.store, self._held, timeout=self._timeout,
                                      until=self._down_since + self._failover_wait, recovered=self._recovered)
        logger.warning("continuation store %s is failing over (%s): tool rounds are held in this worker and follow-ups "
                       "wait for the new primary, for up to %g s", self.store, reason, self._failover_wait)

    def _recovered(self) -> None:
        if self._down_since is not None:
            logger.info("continuation store %s is back after %.1f s: tool rounds keep their hidden part again",
                        self.store, time.monotonic() - self._down_since)
            self._down_since = None

    def _failing_over(self) -> bool:
        return self._failover is not None and self._failover.active

    def _hold(self, keys: Sequence[str], continuation: Continuation) -> None:
        """Keeps a write in this worker until the failover ends (written then, or dropped with a warning)."""
        if not self._held.hold(keys, continuation):
            raise StoreUnavailable(f"the continuation store {self.store} is failing over and this worker holds all the "
                                   f"writes it can ({len(self._held)})")

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        """Writes ``continuation`` under each of ``call_ids``; while the store fails over, holds it in this
        worker (bounded) to be written once the new primary answers: a write it cannot hold raises."""
        if self._failing_over():
            return self._hold(call_ids, continuation)
        try:
            await self._guard(self.store.put, call_ids, continuation)
        except StoreUnavailable:
            if not self._failing_over():
                raise
            self._hold(call_ids, continuation)

    async def put_each(self, writes: Sequence[tuple[Sequence[str], Continuation]]) -> None:
        """:meth:`put` for each of ``writes``, in one call of the store; one call each, each bounded by the
        timeout, when the store writes them one by one anyway (no ``put_each`` of its own): a batch that
        takes longer in all than one write may is no outage."""
        if type(self.store).put_each is ContinuationStore.put_each:
            for call_ids, continuation in writes:
                await self.put(call_ids, continuation)
            return
        if not self._failing_over():
            try:
                await self._guard(self.store.put_each, writes)
                return
            except StoreUnavailable:
                if not self._failing_over():
                    raise
        for call_ids, continuation in writes:
            self._hold(call_ids, continuation)

    async def get(self, call_ids: Iterable[str], *, across_failover: bool = False) -> Continuation | None:
        """What is kept under the first of ``call_ids`` that has something. ``across_failover``: a read
        that meets a failover waits (bounded) for the new primary, and looks again a moment later when it
        finds nothing there (another worker may still be writing what it held)."""
        ids = list(call_ids)
        held = self._held.find(ids)
        if held is not None:
            return held
        try:
            return await self._guard(self.store.get, ids)
        except StoreUnavailable:
            failover = self._failover
            if not across_failover or failover is None or not await failover.back():
                raise
        found = self._held.find(ids) or await self._guard(self.store.get, ids)
        if found is None:
            await asyncio.sleep(SETTLE)
            found = await self._guard(self.store.get, ids)
        return found

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        """What is kept under each of ``keys``: what this worker holds through a failover, the rest from the
        store, in one call (one read each, each bounded by the timeout, when the store reads them one by one
        anyway). While the store fails over, only what is held here: no probe on a request's way (the
        failover's own task looks for the new primary). Raises :class:`StoreUnavailable` when the store
        fails and none of them is held here."""
        by_key = type(self.store).get_each is ContinuationStore.get_each
        if not self._held and not by_key:
            return await self._guard(self.store.get_each, list(keys))
        found = self._held.find_each(keys)
        unread = [key for key, entry in zip(keys, found, strict=True) if entry is None]
        if not unread or (self._down_since is not None and self._failing_over()):
            return found
        try:
            if by_key:
                stored = await self._told("get_each", self._read_one_by_one(unread))
            else:
                stored = await self._guard(self.store.get_each, unread)
        except StoreUnavailable:
            if any(entry is not None for entry in found):  # what is held is still read back; the rest is missing
                return found
            raise
        fill = iter(stored)
        return [entry if entry is not None else next(fill) for entry in found]

    async def _read_one_by_one(self, keys: Sequence[str]) -> list[Continuation | None]:
        return [await self._guarded(self.store.get, [key]) for key in keys]

    async def ping(self) -> None:
        await self._guard(self.store.ping)

    async def close(self) -> None:
        if self._failover is not None and self._failover.active:
            await self._failover.stop()
        if dropped := self._held.drop():
            logger.warning("continuation store %s: %d write(s) held during its failover are not kept (shutting down)",
                           self.store, dropped)
        try:
            async with asyncio.timeout(self._timeout):
                await self.store.close()
        except Exception as exc:  # noqa: BLE001 - shutting down: say so and go on
            logger.warning("could not close the continuation store %s: %s", self.store, exc)

    def __str__(self) -> str:
        return str(self.store)


STATE_URL_FORMS = ("sqlite:///path, redis://host:port/db (rediss:// with TLS, unix:///path.sock), "
                   "redis+sentinel://host:port,host:port/service/db or memory://")


def check_state_url(url: str) -> str:
    """``url`` if :func:`open_store` can use it, else a ``ValueError`` saying what is wrong (not the
    URL itself, which may hold a password). Nothing is opened or asked."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return url
    if parts.scheme == "sqlite":
        if not url.removeprefix("sqlite:///") or not url.startswith("sqlite:///"):
            raise ValueError("a SQLite state URL is sqlite:///relative/path.db or sqlite:////absolute/path.db")
        return url
    if parts.scheme in SENTINEL_SCHEMES:
        SentinelURL(url)
        return url
    if parts.scheme in REDIS_SCHEMES:
        try:
            parts.port  # noqa: B018 - raises for a port that is not a number
        except ValueError:
            raise ValueError(f"the port of a Redis URL is a number: {redacted_url(url)}") from None
        return url
    raise ValueError(f"unsupported state URL scheme {parts.scheme + '://' if parts.scheme else '(none)'}: use {STATE_URL_FORMS}")


def open_store(url: str, ttl: float = DEFAULT_TTL, *, timeout: float = DEFAULT_STORE_TIMEOUT,
               failover_wait: float = DEFAULT_FAILOVER_WAIT) -> GuardedStore:
    """``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, ``redis://host:port/db``
    (``rediss://``, ``unix://``), ``redis+sentinel://host:port,.../service/db`` or ``memory://``,
    guarded (:class:`GuardedStore`): each call takes at most ``timeout`` seconds, and a fault raises
    :class:`StoreUnavailable`; a Sentinel store's failover is waited for up to ``failover_wait`` seconds.
    Raises :class:`StoreOpenError` when a SQLite file cannot be created or
    written, ``ValueError`` for a URL it cannot use."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return GuardedStore(MemoryContinuationStore(ttl), timeout)  # cheap, and every store has one guard
    if scheme == "sqlite":
        return GuardedStore(SQLiteContinuationStore(url.removeprefix("sqlite:///"), ttl, timeout=timeout), timeout)
    if scheme in REDIS_SCHEMES:
        return GuardedStore(RedisContinuationStore(url, ttl, timeout=timeout), timeout, failover_wait=failover_wait)
    raise ValueError(f"unsupported state URL {redacted_url(url)!r}: use {STATE_URL_FORMS}")
