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
from duet.agents.continuations._memory import MemoryContinuationStore
from duet.agents.continuations._redis import RedisContinuationStore
from duet.agents.continuations._sqlite import SQLiteContinuationStore
from duet.agents.continuations._store import (
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
    """

    def __init__(self, store: ContinuationStore, timeout: float = DEFAULT_STORE_TIMEOUT, retry_interval: float = RETRY_INTERVAL) -> None:
        self.store = store
        self._timeout = timeout
        self._retry_interval = retry_interval
        self._down_since: float | None = None  # monotonic time of the first failure of this outage
        self._retry_at = 0.0
        self._probing = False

    @property
    def available(self) -> bool:
        """False from a failed call until the next call that succeeds."""
        return self._down_since is None

    async def _guard(self, call: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        observer = observer_of(current_run())  # a request's store calls are told to its observer
        if observer is None:
            return await self._guarded(call, *args)
        started = time.monotonic()
        outcome: StoreOutcome = "cancelled"
        try:
            result = await self._guarded(call, *args)
            outcome = "miss" if result is None and call.__name__ == "get" else "ok"
            return result
        except StoreUnavailable:
            outcome = "unavailable"
            raise
        finally:
            observer.store_call(call.__name__, outcome, time.monotonic() - started)

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
        else:
            if self._down_since is not None:
                logger.info("continuation store %s is back after %.1f s: tool rounds keep their hidden part again",
                            self.store, time.monotonic() - self._down_since)
                self._down_since = None
            return result
        finally:
            if probe:
                self._probing = False
        # Raised outside the except block: nothing of the failed call (frames, its exception) stays attached.
        self._retry_at = time.monotonic() + self._retry_interval
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning("continuation store %s is unavailable (%s): tool rounds go on without their hidden part "
                           "until it answers again", self.store, reason)
        raise StoreUnavailable(f"the continuation store {self.store} is unavailable: {reason}")

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        await self._guard(self.store.put, call_ids, continuation)

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        return await self._guard(self.store.get, list(call_ids))

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        return await self._guard(self.store.get_each, list(keys))

    async def ping(self) -> None:
        await self._guard(self.store.ping)

    async def close(self) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self.store.close()
        except Exception as exc:  # noqa: BLE001 - shutting down: say so and go on
            logger.warning("could not close the continuation store %s: %s", self.store, exc)

    def __str__(self) -> str:
        return str(self.store)


def open_store(url: str, ttl: float = DEFAULT_TTL, *, timeout: float = DEFAULT_STORE_TIMEOUT) -> ContinuationStore:
    """``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, ``redis://host:port/db`` or
    ``memory://``, guarded (:class:`GuardedStore`): each call takes at most ``timeout`` seconds, and
    a fault raises :class:`StoreUnavailable`. Raises
    :class:`StoreOpenError` when a SQLite file cannot be created or written."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return GuardedStore(MemoryContinuationStore(ttl), timeout)  # cheap, and every store has one guard
    if scheme == "sqlite":
        return GuardedStore(SQLiteContinuationStore(url.removeprefix("sqlite:///"), ttl, timeout=timeout), timeout)
    if scheme in ("redis", "rediss", "unix"):
        return GuardedStore(RedisContinuationStore(url, ttl, timeout=timeout), timeout)
    raise ValueError(f"unsupported state URL {url!r}: use sqlite:///path, redis://host:port/db or memory://")
