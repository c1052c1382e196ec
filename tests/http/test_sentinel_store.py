"""A highly available store: ``duet serve`` with ``DUET_STATE_URL=redis+sentinel://…`` in front of a
real Redis primary, its replica and three real Sentinels. The primary is killed (SIGKILL) under load:
the sentinels promote the replica, and within a bounded window follow-ups keep their hidden part
again; rounds stored before the kill and replicated (what Redis kept) are all found on the new
primary; not one request fails."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from tests.conftest import ANSWER, REASONER, DuetServer
from tests.deployment import LOOKUP, Conversation, RedisServer, Sentinels, converse, first_round, follow_up, mixed_rounds, restored, wait_until
from tests.scripted_upstream import ScriptedUpstream

PIPELINE = "duet-sentinel"
SERVICE = "duet-state"
CLIENTS = 4
RECOVERY_WINDOW = 8.0  # seconds from the sentinels' switch to follow-ups that keep their hidden part again


@pytest.fixture
def sentinel_deployment(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[tuple[DuetServer, RedisServer, RedisServer, Sentinels]]:
    upstream.set_default(mixed_rounds)
    servers: list[RedisServer] = []
    sentinels = None
    duet = None
    try:
        primary = RedisServer(tmp_path / "primary")
        servers.append(primary)
        replica = RedisServer(tmp_path / "replica", replica_of=primary.port)
        servers.append(replica)
        wait_until(lambda: "master_link_status:up" in replica.command("info", "replication"), 15, "the replica syncs")
        sentinels = Sentinels(tmp_path, SERVICE, primary.port)
        wait_until(lambda: sentinels.primary_port() == primary.port, 15, "the sentinels know the primary")
        config = tmp_path / "duet.yaml"
        config.write_text(yaml.safe_dump({"pipelines": [{
            "name": PIPELINE, "reasoner": {"base_url": upstream.base_url, "model": REASONER},
            "answer": {"base_url": upstream.base_url, "model": ANSWER}, "tools": {"functions": [LOOKUP]}}]}))
        duet = DuetServer(["--config", str(config)], {"DUET_STATE_URL": sentinels.url(), "DUET_STORE_TIMEOUT": "0.5"},
                          tmp_path / "duet.log")
        yield duet, primary, replica, sentinels
    finally:
        if duet is not None:
            duet.stop()
        if sentinels is not None:
            sentinels.stop()
        for server in servers:
            server.stop()


def test_the_primary_killed_under_load_fails_over_and_loses_nothing_redis_kept(
    sentinel_deployment: tuple[DuetServer, RedisServer, RedisServer, Sentinels],
) -> None:
    duet, primary, replica, sentinels = sentinel_deployment
    assert duet.health()["status"] == "ready"
    assert f"state store: redis+sentinel://127.0.0.1:{sentinels.ports[0]}," in duet.log.read_text()

    # First rounds whose follow-ups come after the failover; then every write is on the replica (WAIT).
    held_client = httpx.Client(base_url=duet.base_url, timeout=30)
    try:
        held = [first_round(held_client, PIPELINE)[0] for _ in range(4)]
        assert primary.command("wait", "1", "5000") == "1"

        done: list[tuple[float, float, Conversation]] = []
        lock = threading.Lock()
        stopping = threading.Event()

        def client(index: int) -> None:
            count = 0
            while not stopping.is_set():
                began = time.monotonic()
                conversation = converse(duet.base_url, PIPELINE, stream=(index + count) % 2 == 0)
                with lock:
                    done.append((began, time.monotonic(), conversation))
                count += 1

        with ThreadPoolExecutor(CLIENTS) as pool:
            futures = [pool.submit(client, index) for index in range(CLIENTS)]
            try:
                wait_until(lambda: len(done) >= 2 * CLIENTS, 60, "conversations before the kill")
                primary.kill()
                wait_until(lambda: sentinels.primary_port() == replica.port, 30, "the sentinels promote the replica")
                switched_at = time.monotonic()

                def restored_since(start: float) -> list[Conversation]:
                    with lock:
                        return [c for began, _, c in done if began >= start and restored(c.answer)]

                wait_until(lambda: len(restored_since(switched_at)) >= CLIENTS, RECOVERY_WINDOW + 30, "restored follow-ups")
                back_at = min(began for began, _, c in done if began >= switched_at and restored(c.answer))

                def begun_after(start: float) -> list[Conversation]:
                    with lock:
                        return [c for began, _, c in done if began >= start]

                # The load goes on until conversations begun a second after the recovery have ended.
                wait_until(lambda: len(begun_after(back_at + 1.0)) >= CLIENTS, 30, "conversations after the recovery")
            finally:
                stopping.set()
                for future in futures:
                    future.result(timeout=120)

        with lock:
            conversations = [c for _, _, c in done]
            begun_after_back = [c for began, _, c in done if began >= back_at + 1.0]
        assert [c.error for c in conversations if c.error] == []  # not one failed request
        assert back_at - switched_at < RECOVERY_WINDOW, back_at - switched_at
        assert begun_after_back and all(restored(c.answer) for c in begun_after_back), [c.answer for c in begun_after_back]

        # What Redis kept (replicated before the kill) is all there on the new primary.
        for index, first in enumerate(held):
            answer, _ = follow_up(held_client, PIPELINE, first, stream=index % 2 == 1)
            assert restored(answer), answer
        assert duet.health()["status"] == "ready"
    finally:
        held_client.close()
