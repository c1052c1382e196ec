"""The Redis back-end, shared by replicas: one Redis (``redis://``, ``rediss://`` with TLS, ``unix://``)
or the primary that Redis Sentinel names (``redis+sentinel://``, ``rediss+sentinel://``).

A Sentinel URL lists the sentinels, then the monitored service's name and the database::

    redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db][?sentinel_password=...]

The URL's credentials are the Redis servers' (``requirepass``, or an ACL user); the sentinels' own, when
they have one (``sentinel requirepass``), go in ``sentinel_username`` / ``sentinel_password``.
``rediss+sentinel://`` speaks TLS to the sentinels and the servers alike (``ssl_ca_certs``,
``ssl_certfile``, ``ssl_keyfile``, ``ssl_cert_reqs`` as for ``rediss://``). Each new connection asks a
sentinel where the primary is now: after a failover, the first call that fails on the old primary drops
its connection, and the next one reaches the new primary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence
from urllib.parse import parse_qs, unquote, urlsplit

from duet.agents.continuations._store import DEFAULT_STORE_TIMEOUT, DEFAULT_TTL, Continuation, ContinuationStore, decode

if TYPE_CHECKING:
    import redis.asyncio as redis

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
REDIS_SCHEMES = ("redis", "rediss", "unix", *SENTINEL_SCHEMES)
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")
_SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password", *_TLS_OPTIONS)


class SentinelURL:
    """A ``redis+sentinel://`` URL, read (``ValueError`` naming what is wrong)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in SENTINEL_SCHEMES:
            raise ValueError(f"not a Sentinel URL: {parts.scheme}://")
        self.tls = parts.scheme.startswith("rediss")
        where, _, hosts = parts.netloc.rpartition("@")
        user, _, password = where.partition(":")
        self.username = unquote(user) or None
        self.password = unquote(password) or None
        self.sentinels = [_host_port(host) for host in hosts.split(",") if host]
        segments = [unquote(segment) for segment in parts.path.split("/") if segment]
        if not self.sentinels or not segments or len(segments) > 2:
            raise ValueError("a Sentinel URL is redis+sentinel://host:port[,host:port...]/service_name[/db]")
        self.service = segments[0]
        if len(segments) == 2 and not segments[1].isdigit():
            raise ValueError(f"the database of a Sentinel URL is a number, got {segments[1]!r}")
        self.db = int(segments[1]) if len(segments) == 2 else 0
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        unknown = sorted(set(query) - set(_SENTINEL_OPTIONS))
        if unknown:
            raise ValueError(f"unknown Sentinel URL option {unknown[0]!r}: use {', '.join(_SENTINEL_OPTIONS)}")
        self.options = query


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a sentinel is host:port, got {text!r}")
    return host.strip("[]"), int(port)


def _tls(url: SentinelURL) -> dict[str, Any]:
    if not url.tls:
        return {}
    return {"ssl": True, **{key: value for key, value in url.options.items() if key in _TLS_OPTIONS}}


def sentinel_client(url: SentinelURL, connection: dict[str, Any]) -> "redis.Redis":
    """A client of the primary the sentinels name, each connection made with ``connection``'s options."""
    from redis.asyncio.sentinel import Sentinel

    sentinel_auth = {key.removeprefix("sentinel_"): url.options[key] for key in ("sentinel_username", "sentinel_password")
                     if key in url.options}
    timeouts = {key: connection[key] for key in ("socket_connect_timeout", "socket_timeout")}
    sentinel = Sentinel(url.sentinels, sentinel_kwargs={**timeouts, **sentinel_auth, **_tls(url)})
    return sentinel.master_for(url.service, db=url.db, username=url.username, password=url.password,
                               **connection, **_tls(url))


def redacted_url(url: str) -> str:
    """A store URL as logs and messages show it: scheme, hosts and path; no credentials, no options."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


class RedisContinuationStore(ContinuationStore):
    """Redis, for replicas that share state (a server, or the primary Sentinel names). Keys expire on their own."""

    def __init__(self, url: str, ttl: float = DEFAULT_TTL, prefix: str = "duet:continuation:", *, timeout: float = DEFAULT_STORE_TIMEOUT) -> None:
        import redis.asyncio as redis  # optional dependency: only this store needs it
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # Socket timeouts bound every connect and every reply. One immediate retry replaces a pooled
        # connection Redis closed (after a restart, or a failover); redis-py's default is ten, with backoff.
        connection = {"socket_connect_timeout": timeout, "socket_timeout": timeout, "retry": Retry(NoBackoff(), 1)}
        if urlsplit(url).scheme in SENTINEL_SCHEMES:
            self._redis = sentinel_client(SentinelURL(url), connection)
        else:
            self._redis = redis.from_url(url, **connection)
        self._ttl = int(ttl)
        self._prefix = prefix
        self._where = redacted_url(url)
        self._sentinel = urlsplit(url).scheme in SENTINEL_SCHEMES
        # What a call meets during a failover: the old primary refuses or resets (ConnectionError), a demoted
        # one answers READONLY (redis-py turns it into a ConnectionError), the sentinels name no primary
        # (MasterNotFoundError, a ConnectionError), or nothing answers in time.
        self._failover_errors = (redis.ConnectionError, redis.ReadOnlyError, redis.TimeoutError, ConnectionError, TimeoutError)

    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None:
        await self.put_each([(call_ids, continuation)])

    async def put_each(self, writes: Sequence[tuple[Sequence[str], Continuation]]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:  # one round trip for them all
            for call_ids, continuation in writes:
                payload = continuation.model_dump_json()
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

    def fails_over(self, error: BaseException) -> bool:
        return self._sentinel and isinstance(error, self._failover_errors)

    async def close(self) -> None:
        await self._redis.aclose()

    def __str__(self) -> str:
        return self._where
