"""Readiness: may this replica take traffic? Pipelines built, MCP servers up, the state store
reachable and, when asked for, every distinct upstream answering (cached: probes cost the
upstream a request)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping

from duet.agents import Duet
from duet.agents.continuations import ContinuationStore

from duet.api._settings import ServiceOptions

UPSTREAM_CACHE_SECONDS = 5.0


def _failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class Readiness:
    """Runs the readiness checks; ``check()`` returns ``(ready, checks)``, each check ``"ok"`` or why not."""

    def __init__(self, pipelines: Mapping[str, Duet], store: ContinuationStore, options: ServiceOptions) -> None:
        self._pipelines = pipelines
        self._store = store
        self._timeout = options.store_timeout
        self._probe_upstreams = options.ready_probe_upstreams
        self._upstreams: dict[str, str] = {}
        self._upstreams_checked_at = -UPSTREAM_CACHE_SECONDS
        self._upstream_probe: asyncio.Future[dict[str, str]] | None = None

    async def check(self, serving: str) -> tuple[bool, dict[str, Any]]:
        """``serving``: ``"ok"`` once the pipelines are built, else what the service is doing."""
        checks: dict[str, Any] = {"pipelines": serving}
        down = {f"{pipeline}/{server}": info["status"] for pipeline, duet in self._pipelines.items()
                for server, info in duet.services.status().items() if info["status"] != "running"}
        checks["mcp_servers"] = down or "ok"
        try:
            await asyncio.wait_for(self._store.ping(), self._timeout)
            checks["state_store"] = "ok"
        except Exception as exc:  # noqa: BLE001 - any failure means not ready; the reason is the detail
            checks["state_store"] = _failure(exc)
        if self._probe_upstreams:
            upstreams = await self._upstream_states()
            checks["upstreams"] = upstreams
            upstreams_ok = all(state == "ok" for state in upstreams.values())
        else:
            upstreams_ok = True
        ready = serving == "ok" and not down and checks["state_store"] == "ok" and upstreams_ok
        return ready, checks

    async def _upstream_states(self) -> dict[str, str]:
        """Each distinct upstream's answer to its readiness probe, at most one probe round per
        ``UPSTREAM_CACHE_SECONDS`` (concurrent checks share the round in progress)."""
        now = time.monotonic()
        if now - self._upstreams_checked_at < UPSTREAM_CACHE_SECONDS:
            return self._upstreams
        if self._upstream_probe is None or self._upstream_probe.done():
            self._upstream_probe = asyncio.ensure_future(self._probe())
        self._upstreams = await asyncio.shield(self._upstream_probe)
        self._upstreams_checked_at = time.monotonic()
        return self._upstreams

    async def _probe(self) -> dict[str, str]:
        clients: dict[str, Any] = {}  # one probe per upstream server, named by a model it serves
        for duet in self._pipelines.values():
            for client in duet.model_clients:
                url = getattr(client, "base_url", None)
                if isinstance(url, str) and hasattr(client, "check_ready"):
                    clients.setdefault(url, client)
        probes = list(clients.values())
        results = await asyncio.gather(
            *(asyncio.wait_for(client.check_ready(self._timeout), self._timeout + 1) for client in probes),
            return_exceptions=True,
        )
        return {
            getattr(client, "model", "upstream"): _failure(result) if isinstance(result, BaseException) else
            ("ok" if result is not False else "not ready")
            for client, result in zip(probes, results, strict=True)
        }
