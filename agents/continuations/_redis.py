"""The Redis back-end, shared by replicas: ``redis://``, ``rediss://`` (TLS) or ``unix://``."""

from __future__ import annotations

from typing import Iterable, Sequence
from urllib.parse import urlsplit

from duet.agents.continuations._store import DEFAULT_STORE_TIMEOUT, DEFAULT_TTL, Continuation, ContinuationStore, decode


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
        return decode(next((value for value in values if value), None), ids)

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        if not keys:
            return []
        values = await self._redis.mget([self._prefix + key for key in keys])
        return [decode(value, [key]) for value, key in zip(values, keys, strict=True)]

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()

    def __str__(self) -> str:
        return self._where
