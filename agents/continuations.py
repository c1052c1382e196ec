"""What a client does not see of a tool round, kept until its follow-up request arrives.

When the answer model calls client tools, Duet returns only those calls. The rest of the round —
service tools it ran (calls and results), earlier service-only rounds of the same turn, and the
reasoning the round was answered with — would be lost: the client's follow-up brings back only
what it saw. Duet stores that hidden part, keyed by each returned tool-call id, and splices it back
into the conversation when a follow-up carries those ids.

SQLite (a file, the default) or Redis (``redis://``, shared by several replicas); entries expire.
"""

from __future__ import annotations

import abc
import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlsplit

from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)
from pydantic import BaseModel, Field, TypeAdapter

DEFAULT_TTL = 24 * 3600.0
DEFAULT_STATE_URL = "sqlite:///.duet/state.db"


class Continuation(BaseModel):
    """The hidden part of one round. ``turn`` holds the messages the answer agent added in its turn,
    ending with the assistant message that made *all* the round's calls and the results of the
    service calls among them."""

    turn: list[LLMMessage] = Field(default_factory=list)
    reasoning: str = ""


_CONTINUATION = TypeAdapter(Continuation)


class ContinuationStore(abc.ABC):
    """Where hidden parts wait for their follow-up."""

    @abc.abstractmethod
    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None: ...

    @abc.abstractmethod
    async def get(self, call_ids: Iterable[str]) -> Continuation | None: ...

    async def ping(self) -> None:
        """Raises when the store cannot be reached (readiness checks call it)."""
        return None

    async def close(self) -> None:
        return None


class MemoryContinuationStore(ContinuationStore):
    """For a single process (scripts, tests)."""

    def __init__(self, ttl: float = DEFAULT_TTL) -> None:
        self._ttl = ttl
        self._entries: dict[str, tuple[float, Continuation]] = {}

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        expires = time.time() + self._ttl
        now = time.time()
        self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
        for call_id in call_ids:
            self._entries[call_id] = (expires, continuation)

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        now = time.time()
        for call_id in call_ids:
            entry = self._entries.get(call_id)
            if entry is not None and entry[0] > now:
                return entry[1]
        return None


class SQLiteContinuationStore(ContinuationStore):
    """A SQLite file; calls run in a worker thread so the event loop never waits on the disk."""

    def __init__(self, path: str | Path, ttl: float = DEFAULT_TTL) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._ttl = ttl
        self._connection = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute(
            "CREATE TABLE IF NOT EXISTS continuations (call_id TEXT PRIMARY KEY, payload TEXT NOT NULL, expires_at REAL NOT NULL)"
        )
        # One thread of its own: the disk never waits behind tools in a shared executor.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duet-state")

    async def _run(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    def _put(self, call_ids: Sequence[str], payload: str) -> None:
        now = time.time()
        with self._connection:
            self._connection.execute("DELETE FROM continuations WHERE expires_at <= ?", (now,))
            self._connection.executemany(
                "INSERT OR REPLACE INTO continuations VALUES (?, ?, ?)", [(i, payload, now + self._ttl) for i in call_ids]
            )

    def _get(self, call_ids: list[str]) -> str | None:
        marks = ",".join("?" * len(call_ids))
        row = self._connection.execute(
            f"SELECT payload FROM continuations WHERE call_id IN ({marks}) AND expires_at > ? LIMIT 1", (*call_ids, time.time())
        ).fetchone()
        return row[0] if row else None

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        await self._run(self._put, call_ids, continuation.model_dump_json())

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        ids = list(call_ids)
        if not ids:
            return None
        payload = await self._run(self._get, ids)
        return _CONTINUATION.validate_json(payload) if payload else None

    async def close(self) -> None:
        await self._run(self._connection.close)
        self._thread.shutdown()


class RedisContinuationStore(ContinuationStore):
    """Redis, for replicas that share state. Keys expire on their own."""

    def __init__(self, url: str, ttl: float = DEFAULT_TTL, prefix: str = "duet:continuation:") -> None:
        import redis.asyncio as redis  # optional dependency: only this store needs it

        self._redis = redis.from_url(url)
        self._ttl = int(ttl)
        self._prefix = prefix

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        payload = continuation.model_dump_json()
        async with self._redis.pipeline(transaction=False) as pipe:
            for call_id in call_ids:
                pipe.set(self._prefix + call_id, payload, ex=self._ttl)
            await pipe.execute()

    async def get(self, call_ids: Iterable[str]) -> Continuation | None:
        keys = [self._prefix + call_id for call_id in call_ids]
        if not keys:
            return None
        payload = next((value for value in await self._redis.mget(keys) if value), None)
        return _CONTINUATION.validate_json(payload) if payload else None

    async def close(self) -> None:
        await self._redis.aclose()


def open_store(url: str, ttl: float = DEFAULT_TTL) -> ContinuationStore:
    """``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, ``redis://host:port/db`` or ``memory://``."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        return SQLiteContinuationStore(url.removeprefix("sqlite:///"), ttl)
    if scheme in ("redis", "rediss", "unix"):
        return RedisContinuationStore(url, ttl)
    if scheme == "memory":
        return MemoryContinuationStore(ttl)
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
