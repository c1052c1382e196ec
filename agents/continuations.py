"""What a client does not see of a tool round, kept until its follow-up request arrives.

When the answer model calls client tools, Duet returns only those calls. The rest of the round —
service tools it ran (calls and results), earlier service-only rounds of the same turn, and the
reasoning the round was answered with — would be lost: the client's follow-up brings back only
what it saw. Duet stores that hidden part, keyed by each returned tool-call id, and splices it back
into the conversation when a follow-up carries those ids.

SQLite (a file, the default) or Redis (``redis://``, shared by several replicas); entries expire.
The store is an optimisation of answer quality, never a reason to fail a request: :func:`open_store`
and ``Duet`` (for a store passed in from Python) wrap it in a :class:`GuardedStore`, which bounds
every call by a timeout and turns faults into :class:`StoreUnavailable` (reported once per outage),
so a round goes on without its hidden part.

Every entry belongs to an owner (:func:`owned`): the API key whose request stored it, as a stable,
non-reversible id, so one key never reads or continues what another stored.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import sqlite3
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Sequence, TypeVar
from urllib.parse import urlsplit

from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator

from .answer_reasoning import ModelReasoning, ReasonedAssistantMessage, calls_key, with_reasoning

from .observe import StoreOutcome, observer_of
from .run_context import current_run

logger = logging.getLogger(__name__)

DEFAULT_TTL = 24 * 3600.0
DEFAULT_STATE_URL = "sqlite:///.duet/state.db"
DEFAULT_STORE_TIMEOUT = 2.0  # seconds per store call (the service takes it from ServiceOptions.store_timeout)
RETRY_INTERVAL = 1.0  # seconds a store that failed is left alone before a call tries it again
SWEEP_INTERVAL = 60.0  # seconds between two sweeps of expired SQLite rows
SWEEP_BATCH = 500  # rows deleted per statement: a sweep never holds the store for long
_T = TypeVar("_T")

DEFAULT_OWNER = ""
"""The owner of state stored without a key of its own: an open endpoint, keys that share state
(``state_scope: shared``), a run started from Python."""


def owned(owner: str, key: str) -> str:
    """``key`` in ``owner``'s part of the store. Another owner's entry under the same key is not
    found, as an unknown key is not: same code path, same answer. The default owner's keys are as
    Duet wrote them before state was scoped to keys."""
    return f"{owner}/{key}" if owner else key


class Continuation(BaseModel):
    """The hidden part of one round. ``turn`` holds the messages the answer agent added in its turn,
    ending with the assistant message that made *all* the round's calls and the results of the
    service calls among them. ``reasoning`` is the reasoner's; the answer model's own reasoning on
    each of the turn's tool-calling messages is kept on them (:class:`ReasonedAssistantMessage`) and,
    so that it survives serialisation, in ``model_reasoning`` under the message's first call id."""

    turn: list[LLMMessage] = Field(default_factory=list)
    reasoning: str = ""
    record: dict[str, Any] | None = None
    """Kept by ``duet.api.responses`` instead of a round: a stored Responses API response and the
    conversation items it continues (``previous_response_id``), in the same store and expiry."""
    model_reasoning: dict[str, ModelReasoning] = Field(default_factory=dict)
    grounding: str = Field("", description="The retrieved context the round was answered with (grounding).")

    @model_validator(mode="after")
    def _reasoning_on_the_turn(self) -> "Continuation":
        """Each tool-calling message and its reasoning in both places: a stored turn is read back as
        plain assistant messages, a fresh one carries its reasoning only on them."""
        for index, message in enumerate(self.turn):
            key = calls_key(message)
            if key is None:
                continue
            if isinstance(message, ReasonedAssistantMessage):
                self.model_reasoning.setdefault(key, message.reasoning)
            elif key in self.model_reasoning:
                self.turn[index] = with_reasoning(message, self.model_reasoning[key])  # type: ignore[arg-type]
        return self


_CONTINUATION = TypeAdapter(Continuation)


class StoreOpenError(RuntimeError):
    """The store cannot be opened (e.g. an unwritable SQLite path): the service does not start."""


class StoreUnavailable(RuntimeError):
    """A store call failed or did not answer in time. The :class:`GuardedStore` has reported it
    (once per outage); the caller goes on without the stored part."""


def _decode(payload: str | bytes | None, call_ids: Sequence[str]) -> Continuation | None:
    if not payload:
        return None
    try:
        return _CONTINUATION.validate_json(payload)
    except ValidationError:  # e.g. written by an older Duet: that round goes on without it
        logger.warning("unreadable saved state for tool calls %s: ignored", ", ".join(call_ids))
        return None


class ContinuationStore(abc.ABC):
    """Where hidden parts wait for their follow-up."""

    @abc.abstractmethod
    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None: ...

    @abc.abstractmethod
    async def get(self, call_ids: Iterable[str]) -> Continuation | None: ...

    async def ping(self) -> None:
        """Raises when the store cannot be reached (readiness checks call it)."""
        return None

    @property
    def available(self) -> bool:
        """False while the store is known to be out (a :class:`GuardedStore` knows; others are taken to be up)."""
        return True

    async def close(self) -> None:
        return None

    def __str__(self) -> str:
        return type(self).__name__


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

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        now = time.monotonic()
        for call_id in call_ids:
            entry = self._entries.get(call_id)
            if entry is not None and entry[0] > now:
                return entry[1]
        return None

    def __str__(self) -> str:
        return "memory"


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
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duet-state")
        self._next_sweep = time.monotonic() + sweep_interval
        self._thread.submit(self._sweep, time.time())  # what expired while the service was down

    async def _run(self, function: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    def _put(self, call_ids: Sequence[str], payload: str) -> None:
        now = time.time()
        self._connection.executemany(
            "INSERT OR REPLACE INTO continuations VALUES (?, ?, ?)", [(i, payload, now + self._ttl) for i in call_ids]
        )
        if time.monotonic() >= self._next_sweep:  # queued: this put returns first
            self._next_sweep = time.monotonic() + self._sweep_interval
            self._thread.submit(self._sweep, now)

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

    def _ping(self) -> None:
        self._connection.execute("SELECT 1 FROM continuations LIMIT 1").fetchall()

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        await self._run(self._put, call_ids, continuation.model_dump_json())

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        ids = list(call_ids)
        if not ids:
            return None
        return _decode(await self._run(self._get, ids), ids)

    async def ping(self) -> None:
        await self._run(self._ping)

    async def close(self) -> None:
        self._closed = True
        await self._run(self._connection.close)
        self._thread.shutdown(cancel_futures=True)

    def __str__(self) -> str:
        return f"sqlite:///{self._path}"


class RedisContinuationStore(ContinuationStore):
    """Redis, for replicas that share state. Keys expire on their own."""

    def __init__(self, url: str, ttl: float = DEFAULT_TTL, prefix: str = "duet:continuation:", *, timeout: float = DEFAULT_STORE_TIMEOUT) -> None:
        import redis.asyncio as redis  # optional dependency: only this store needs it
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # Socket timeouts bound every connect and every reply. One immediate retry replaces a pooled
        # connection Redis closed (after a restart); redis-py's default is ten, with backoff.
        self._redis = redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 1))
        self._ttl = int(ttl)
        self._prefix = prefix
        parts = urlsplit(url)  # named in logs without its password
        self._where = f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        payload = continuation.model_dump_json()
        async with self._redis.pipeline(transaction=False) as pipe:
            for call_id in call_ids:
                pipe.set(self._prefix + call_id, payload, ex=self._ttl)
            await pipe.execute()

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        ids = list(call_ids)
        if not ids:
            return None
        values = await self._redis.mget([self._prefix + call_id for call_id in ids])
        return _decode(next((value for value in values if value), None), ids)

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()

    def __str__(self) -> str:
        return self._where


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


def splice(conversation: list[LLMMessage], index: int, continuation: Continuation) -> list[LLMMessage]:
    """The conversation with the hidden part of the tool round at ``index`` put back.

    The round in ``conversation`` is an assistant message with the client's calls followed by their
    results; it is replaced by the stored turn (earlier service rounds, the assistant message with
    every call) and the stored service results join the client's results.
    """
    if not continuation.turn:
        return conversation
    *earlier, full_calls, service_results = continuation.turn
    if not isinstance(full_calls, AssistantMessage) or not isinstance(service_results, FunctionExecutionResultMessage):
        return conversation
    following = conversation[index + 1] if index + 1 < len(conversation) else None
    client_results = following.content if isinstance(following, FunctionExecutionResultMessage) else []
    by_id = {r.call_id: r for r in [*service_results.content, *client_results]}
    calls = full_calls.content if isinstance(full_calls.content, list) else []
    merged = FunctionExecutionResultMessage(content=[by_id[c.id] for c in calls if c.id in by_id])
    rest = conversation[index + 2 :] if isinstance(following, FunctionExecutionResultMessage) else conversation[index + 1 :]
    return [*conversation[:index], *earlier, full_calls, merged, *rest]


def tool_rounds(conversation: Sequence[LLMMessage]) -> list[int]:
    """Indices of the assistant messages with tool calls since the last user message, oldest first."""
    rounds: list[int] = []
    for index in range(len(conversation) - 1, -1, -1):
        message = conversation[index]
        if isinstance(message, (UserMessage, SystemMessage)):
            break
        if isinstance(message, AssistantMessage) and isinstance(message.content, list):
            rounds.append(index)
    return rounds[::-1]
