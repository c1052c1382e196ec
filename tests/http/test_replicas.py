"""Two Duet replicas (``duet serve`` processes) sharing a real Redis behind a real HAProxy on
loopback (``deploy/haproxy/haproxy.cfg`` as shipped, with round robin and fast checks): round-robin traffic, mixed tool rounds whose follow-up lands on the other replica, and
one replica killed mid-run, which the balancer's health check (``/health/ready``) takes out while
the rest of the traffic succeeds and follow-ups still find their state in Redis.

Every process is started and stopped here by its PID; every request and wait has a bound."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import DuetServer
from tests.deployment import (
    replicas_behind_balancer,
    REQUEST_TIMEOUT,
    Balancer,
    BalancerOptions,
    Conversation,
    converse,
    first_round,
    follow_up,
    mixed_rounds,
    restored,
    wait_for_states,
)
from tests.scripted_upstream import ScriptedUpstream

PIPELINE = "duet-replicas"
# The shipped HAProxy configuration, with round robin (requests alternate: each follow-up lands on the
# other replica), each replica's /health/ready checked every 200 ms (two failures take one out), and
# full weight at once (no slowstart). A check may take up to 2 s ("timeout check"; without it the
# interval is the timeout, and a replica slow to answer on a loaded machine was taken out with the
# killed one: 502/503 for everything). A killed replica refuses the connection at once, so it is still
# taken out within two intervals.
OPTIONS = BalancerOptions(balance="roundrobin", check_interval="200ms", check_timeout="2s", slowstart=False)


@pytest.fixture
def deployment(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[tuple[list[DuetServer], Balancer]]:
    """Two replicas of one configuration, sharing Redis, behind HAProxy."""
    upstream.set_default(mixed_rounds)
    with replicas_behind_balancer(upstream.base_url, tmp_path, PIPELINE, options=OPTIONS) as (replicas, balancer, _):
        yield replicas, balancer


def test_replicas_behind_a_balancer_share_rounds_and_survive_a_killed_replica(
    deployment: tuple[list[DuetServer], Balancer], upstream: ScriptedUpstream, request: pytest.FixtureRequest
) -> None:
    replicas, balancer = deployment

    # Round robin, one request at a time: each first round and its follow-up land on different replicas.
    sequential = [converse(balancer.base_url, PIPELINE, stream=i % 2 == 1) for i in range(6)]
    assert [c.error for c in sequential] == [""] * 6
    served = [name for c in sequential for name in (c.first_by, c.follow_up_by)]
    assert served == ["duet-1", "duet-2"] * 6
    assert all(restored(c.answer) for c in sequential), [c.answer for c in sequential]

    # First rounds that replica 0 serves, whose follow-ups come after it is gone.
    held_client = httpx.Client(base_url=balancer.base_url, timeout=REQUEST_TIMEOUT)
    request.addfinalizer(held_client.close)
    held = [first_round(held_client, PIPELINE) for _ in range(4)]
    assert [response.headers["x-served-by"] for _, response in held] == ["duet-1", "duet-2"] * 2

    # Concurrent traffic; replica 0 is killed (SIGKILL, by its PID) while it runs.
    killed = replicas[0]
    total, kill_after = 60, 20
    started = threading.Semaphore(0)

    def one(index: int) -> Conversation:
        started.release()
        return converse(balancer.base_url, PIPELINE, stream=index % 2 == 0)

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, i) for i in range(total)]
        for _ in range(kill_after):
            assert started.acquire(timeout=60)
        killed.process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        killed.process.wait(10)
        # Two failed checks take it out: about 2 x CHECK_INTERVAL_MS, while the traffic goes on.
        wait_for_states(balancer, {"duet-1": "DOWN", "duet-2": "UP"}, timeout=10)
        taken_out_after = time.monotonic() - killed_at
        conversations = [future.result(timeout=120) for future in futures]
    assert taken_out_after < 5

    failed = [c for c in conversations if c.error]
    # Only a request that replica 0 had already begun can be lost with it (HAProxy retries a refused
    # connection on the other replica): at most one per client thread.
    assert len(failed) <= 6, [c.error for c in failed]
    succeeded = [c for c in conversations if not c.error]
    assert len(succeeded) >= total - 6
    assert all(restored(c.answer) for c in succeeded), [c.answer for c in succeeded if not restored(c.answer)]

    # The rounds replica 0 began before it died are finished by replica 1: their state was in Redis.
    for (first, _), stream in zip(held, (False, True, False, True), strict=True):
        answer, response = follow_up(held_client, PIPELINE, first, stream)
        assert response.headers["x-served-by"] == "duet-2" and restored(answer), answer

    # With replica 0 out, everything goes to replica 1, and still finds its state.
    after = [converse(balancer.base_url, PIPELINE, stream=i % 2 == 0) for i in range(4)]
    assert [c.error for c in after] == [""] * 4
    assert {c.first_by for c in after} | {c.follow_up_by for c in after} == {"duet-2"}
    assert all(restored(c.answer) for c in after)
