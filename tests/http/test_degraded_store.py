"""A state-store outage is degraded service, not an outage: two ``duet serve`` replicas share a real
Redis behind a real HAProxy serving ``deploy/haproxy/haproxy.cfg`` as shipped; Redis is killed under load and
started again. Every request succeeds; both replicas stay in the balancer's pool (``/health/ready``
200 ``degraded``, naming the store); tool rounds go on without their hidden part while it is out and
keep it again once it is back; ``duet_store_up`` says so, and each replica logs the outage and the
recovery once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import DuetServer
from tests.deployment import (
    BOTH_UP,
    replicas_behind_balancer,
    Balancer,
    Conversation,
    RedisServer,
    converse,
    degraded,
    mixed_rounds,
    restored,
    wait_until,
)
from tests.scripted_upstream import ScriptedUpstream

PIPELINE = "duet-degraded"
CLIENTS = 6


@pytest.fixture
def deployment(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[tuple[list[DuetServer], Balancer, RedisServer]]:
    upstream.set_default(mixed_rounds)
    with replicas_behind_balancer(upstream.base_url, tmp_path, PIPELINE, {"DUET_STORE_TIMEOUT": "0.5"}) as (replicas, balancer, redis):
        yield replicas, balancer, redis


def store_up(replica: DuetServer) -> float:
    """The replica's ``duet_store_up`` (its one worker's)."""
    text = httpx.get(f"{replica.base_url}/metrics", timeout=5).text
    [line] = [line for line in text.splitlines() if line.startswith("duet_store_up{")]
    return float(line.rsplit(" ", 1)[1])


class Load:
    """``CLIENTS`` threads sending conversations through the balancer until stopped; each
    conversation with the times it began and ended."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.done: list[tuple[float, float, Conversation]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.pool = ThreadPoolExecutor(CLIENTS)
        self.futures = [self.pool.submit(self._client, index) for index in range(CLIENTS)]

    def _client(self, index: int) -> None:
        count = 0
        while not self.stopping.is_set():
            began = time.monotonic()
            conversation = converse(self.base_url, PIPELINE, stream=(index + count) % 2 == 0)
            with self.lock:
                self.done.append((began, time.monotonic(), conversation))
            count += 1

    def finished_between(self, start: float, end: float) -> list[Conversation]:
        with self.lock:
            return [c for began, ended, c in self.done if began >= start and ended <= end]

    def count_after(self, start: float) -> int:
        return len(self.finished_between(start, float("inf")))

    def stop(self) -> list[Conversation]:
        self.stopping.set()
        for future in self.futures:
            future.result(timeout=120)
        self.pool.shutdown()
        return [c for _, _, c in self.done]


def test_a_store_outage_under_load_degrades_and_recovers_without_a_failed_request(
    deployment: tuple[list[DuetServer], Balancer, RedisServer],
) -> None:
    replicas, balancer, redis = deployment
    restarted: list[RedisServer] = []
    try:
        run_the_outage(replicas, balancer, redis, restarted)
    finally:
        for server in restarted:
            server.stop()


def run_the_outage(replicas: list[DuetServer], balancer: Balancer, redis: RedisServer, restarted: list[RedisServer]) -> None:
    load = Load(balancer.base_url)
    try:
        started = time.monotonic()
        wait_until(lambda: load.count_after(started) >= 2 * CLIENTS, 60, "conversations before the outage")

        redis.kill()
        killed_at = time.monotonic()
        # Both replicas find out (a tool round's store call, or their own ping) and say so, still ready.
        for replica in replicas:
            wait_until(lambda: replica.health()["status"] == "degraded", 15, "the replica reports degraded")
            health = httpx.get(f"{replica.base_url}/health/ready", timeout=5)
            assert health.status_code == 200
            assert set(health.json()["degraded"]) == {"state_store"} and health.json()["checks"]["state_store"] != "ok"
            wait_until(lambda: store_up(replica) == 0, 5, "duet_store_up 0")
        # Traffic goes on through the balancer, whose checks (every 2 s, two failures take a replica out) keep both in.
        outage_states: list[dict[str, str]] = []

        def enough_degraded_traffic() -> bool:
            outage_states.append(balancer.server_states())
            return load.count_after(killed_at + 1.0) >= 2 * CLIENTS and time.monotonic() - killed_at > 6.0

        wait_until(enough_degraded_traffic, 60, "conversations during the outage")
        assert all(states == BOTH_UP for states in outage_states), [s for s in outage_states if s != BOTH_UP]
        restart_at = time.monotonic()

        restarted.append(RedisServer(redis.directory, redis.port))  # back where it was (empty: it kept nothing)
        for replica in replicas:
            wait_until(lambda: replica.health()["status"] == "ready", 20, "the replica reports ready")
            wait_until(lambda: store_up(replica) == 1, 10, "duet_store_up 1")
        recovered_at = time.monotonic()
        wait_until(lambda: load.count_after(recovered_at) >= 2 * CLIENTS, 60, "conversations after the outage")
    finally:
        conversations = load.stop()
    assert [c.error for c in conversations if c.error] == []  # not one failed request
    during = load.finished_between(killed_at + 1.0, restart_at)
    assert during and all(degraded(c.answer) and c.unsaved == "tool_round" for c in during), [(c.answer, c.unsaved) for c in during]
    after = load.finished_between(recovered_at, float("inf"))
    assert after and all(restored(c.answer) and not c.unsaved for c in after), [c.answer for c in after]
    before = load.finished_between(started, killed_at)
    assert before and all(restored(c.answer) for c in before)
    assert {c.first_by for c in conversations} == {"duet-1", "duet-2"}
    for replica in replicas:  # one line when the store goes, one when it is back
        log = replica.log.read_text()
        assert log.count("is unavailable (") == 1 and log.count("is back after") == 1, log
