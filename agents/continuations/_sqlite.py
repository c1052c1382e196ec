"""The SQLite back-end (a file, the default): ``sqlite:///path``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from duet.agents.continuations._store import (
    DEFAULT_STORE_TIMEOUT,
    DEFAULT_TTL,
    Continuation,
    ContinuationStore,
    StoreOpenError,
    decode,
)

logger = logging.getLogger("duet.agents.continuations")

SWEEP_INTERVAL = 60.0  # seconds between two sweeps of expired SQLite rows
SWEEP_BATCH = 500  # rows deleted per statement: a sweep never holds the store for long
_T = TypeVar("_T")
_INSERT = "INSERT OR REPLACE INTO continuations VALUES (?, ?, ?)"


class StoreThread:
    """The thread a store's calls run on, one after the other. An awaited call costs a future and a
    queue entry (``loop.run_in_executor`` costs a ``concurrent.futures`` future, its lock and
    condition, a thread-count check and the chaining of two futures: some forty Python calls on the
    event loop for each store call of a request). A daemon: a store never closed does not hold the
    interpreter at exit (the service closes its store at shutdown, after its writes settle)."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any] | None] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def call(self, function: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        """``function(*args)`` on the thread, behind the calls queued before it: its result, awaited."""
        if self._closed:
            raise RuntimeError("the store's thread is closed")
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._calls.put((function, args, future))
        return future

    def submit(self, function: Callable[..., Any], *args: Any) -> None:
        """``function(*args)`` on the thread, behind the calls queued before it; nobody waits for it."""
        if self._closed:
            raise RuntimeError("the store's thread is closed")
        self._calls.put((function, args, None))

    def close(self) -> None:
        """No call is taken any more; the thread ends after the calls already queued."""
        self._closed = True
        self._calls.put(None)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            _run_one(*item)
            item = None  # nothing of a call is kept while the thread waits for the next


def _run_one(function: Callable[..., Any], args: tuple[Any, ...], future: asyncio.Future[Any] | None) -> None:
    if future is not None and future.done():  # its caller gave up (cancelled, timed out) before its turn
        return
    try:
        result, error = function(*args), None
    except BaseException as exc:  # noqa: BLE001 - handed to the caller, as an executor would
        result, error = None, exc
    if future is not None:
        try:
            future.get_loop().call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:  # its loop is closed: nobody waits any more
            pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # its caller was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class SQLiteContinuationStore(ContinuationStore):
    """A SQLite file; calls run in a thread of the store's own, so the event loop never waits on the
    disk. A put is one indexed insert, whatever the number of stored rounds: expired rows are deleted
    on that thread in batches of ``SWEEP_BATCH`` (request calls queued meanwhile run between two
    batches), at startup and then at most every ``sweep_interval`` seconds."""

    def __init__(
        self, path: str | Path, ttl: float = DEFAULT_TTL, *, timeout: float = DEFAULT_STORE_TIMEOUT, sweep_interval: float = SWEEP_INTERVAL
    ) -> None:
        self._path = Path(path)
        self._ttl = ttl
        self._sweep_interval = sweep_interval
        self._closed = False
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # timeout: how long a call waits for another process's write lock.
            self._connection = sqlite3.connect(self._path, timeout=timeout, check_same_thread=False, isolation_level=None)
            self._connection.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL never corrupts the file; a power cut may lose the last rounds' hidden parts,
            # which only costs those follow-ups their hidden part. It saves an fsync per put.
            self._connection.execute("PRAGMA synchronous=NORMAL")
            self._connection.execute(
                "CREATE TABLE IF NOT EXISTS continuations (call_id TEXT PRIMARY KEY, payload TEXT NOT NULL, expires_at REAL NOT NULL)"
            )
            self._connection.execute("CREATE INDEX IF NOT EXISTS continuations_by_expiry ON continuations (expires_at)")
            self._connection.execute("BEGIN IMMEDIATE")  # fails now, not on the first put, if the file is read-only
            self._connection.execute("ROLLBACK")
        except (OSError, sqlite3.Error) as exc:
            raise StoreOpenError(f"cannot open the continuation store {self._path}: {exc}") from None
        # One thread of its own: the disk never waits behind tools in a shared executor.
        self._thread = StoreThread("duet-state")
        self._next_sweep = time.monotonic() + sweep_interval
        self._thread.submit(self._sweep, time.time())  # what expired while the service was down

    async def _run(self, function: Callable[..., _T], *args: Any) -> _T:
        return await self._thread.call(function, *args)

    def _put(self, call_ids: Sequence[str], payload: str) -> None:
        self._put_each([(call_ids, payload)])

    def _put_each(self, writes: list[tuple[Sequence[str], str]]) -> None:
        now = time.time()
        rows = [(i, payload, now + self._ttl) for call_ids, payload in writes for i in call_ids]
        if len(rows) == 1:
            self._connection.execute(_INSERT, rows[0])
        else:
            self._put_rows(rows)
        if time.monotonic() >= self._next_sweep:  # queued: this put returns first
            self._next_sweep = time.monotonic() + self._sweep_interval
            self._thread.submit(self._sweep, now)

    def _put_rows(self, rows: list[tuple[str, str, float]]) -> None:
        """The rows in one transaction: all or none, and one commit. Without a transaction of its own
        (``isolation_level=None``) ``executemany`` commits each row: a reasoning kept under its two keys
        cost two commits, each a WAL write of the table's and both indexes' pages (~25 µs of CPU)."""
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")  # the write lock now, waited for as any write's (``timeout``)
        try:
            connection.executemany(_INSERT, rows)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    connection.execute("ROLLBACK")
            raise

    def _sweep(self, now: float) -> None:
        """Deletes one batch of rows expired at ``now``; while batches come back full, queues the
        next one behind whatever calls are waiting for the thread."""
        if self._closed:
            return
        try:
            deleted = self._connection.execute(
                "DELETE FROM continuations WHERE rowid IN (SELECT rowid FROM continuations WHERE expires_at <= ? LIMIT ?)",
                (now, SWEEP_BATCH),
            ).rowcount
        except sqlite3.Error as exc:  # the next sweep tries again; request calls report their own faults
            logger.warning("could not delete expired rounds from the continuation store %s: %s", self._path, exc)
            return
        if deleted == SWEEP_BATCH:
            try:
                self._thread.submit(self._sweep, now)
            except RuntimeError:  # closing
                pass

    def _get(self, call_ids: list[str]) -> str | None:
        marks = ",".join("?" * len(call_ids))
        row = self._connection.execute(
            f"SELECT payload FROM continuations WHERE call_id IN ({marks}) AND expires_at > ? LIMIT 1", (*call_ids, time.time())
        ).fetchone()
        return row[0] if row else None

    def _get_each(self, keys: list[str]) -> dict[str, str]:
        marks = ",".join("?" * len(keys))
        rows = self._connection.execute(
            f"SELECT call_id, payload FROM continuations WHERE call_id IN ({marks}) AND expires_at > ?", (*keys, time.time())
        ).fetchall()
        return dict(rows)

    def _ping(self) -> None:
        self._connection.execute("SELECT 1 FROM continuations LIMIT 1").fetchall()

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        await self._run(self._put, call_ids, continuation.model_dump_json())

    async def put_each(self, writes: Sequence[tuple[Sequence[str], Continuation]]) -> None:
        await self._run(self._put_each, [(call_ids, continuation.model_dump_json()) for call_ids, continuation in writes])

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        ids = list(call_ids)
        if not ids:
            return None
        return decode(await self._run(self._get, ids), ids)

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        if not keys:
            return []
        payloads = await self._run(self._get_each, list(keys))
        return [decode(payloads.get(key), [key]) for key in keys]

    async def ping(self) -> None:
        await self._run(self._ping)

    async def close(self) -> None:
        self._closed = True
        await self._run(self._connection.close)
        self._thread.close()

    def __str__(self) -> str:
        return f"sqlite:///{self._path}"
