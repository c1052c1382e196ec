"""Duet at scale on one machine: 3 replicas (``duet serve``) behind HAProxy (``deploy/haproxy/haproxy.cfg`` as
shipped, addresses changed), sharing a Redis primary and its replica through 3 Redis Sentinels
(``redis+sentinel://``), under mixed load (a tool round with a service tool and a client tool, then its
follow-up, streamed or not). A third of the way in, one replica is SIGKILLed; half way, the Redis
primary is, and the sentinels fail over to the replica.

Reported: conversations and requests, requests lost (each with the error its client saw: only those
on the killed replica may fail), follow-ups restored (the hidden part found: target >= 99 % outside the
failover window), how long HAProxy took to take the killed replica out, and how long the store was
out. Figures go to ``bench/results/scale-<time>.json`` (``record.py``).

Run from the repository root: ``.venv/bin/python bench/scale.py [--seconds 60 --clients 8]``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from record import begin, save

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.conftest import ANSWER, REASONER, DuetServer  # noqa: E402
from tests.deployment import (  # noqa: E402
    LOOKUP, Balancer, Conversation, RedisServer, Sentinels, converse, mixed_rounds, restored, start_balancer, wait_for_states,
    wait_until,
)
from tests.scripted_upstream import ScriptedUpstream  # noqa: E402

PIPELINE = "duet-scale"
SERVICE = "duet-state"
REPLICAS = 3


class Load:
    """Client threads sending conversations through the balancer until stopped."""

    def __init__(self, base_url: str, clients: int) -> None:
        self.done: list[tuple[float, float, Conversation]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.pool = ThreadPoolExecutor(clients)
        self.futures = [self.pool.submit(self._client, base_url, index) for index in range(clients)]

    def _client(self, base_url: str, index: int) -> None:
        count = 0
        while not self.stopping.is_set():
            began = time.monotonic()
            conversation = converse(base_url, PIPELINE, stream=(index + count) % 2 == 0)
            with self.lock:
                self.done.append((began, time.monotonic(), conversation))
            count += 1

    def stop(self) -> list[tuple[float, float, Conversation]]:
        self.stopping.set()
        for future in self.futures:
            future.result(timeout=300)
        self.pool.shutdown()
        return self.done


def deploy(stack: ExitStack, directory: Path, upstream: ScriptedUpstream, failover_wait: float | None) -> tuple[list[DuetServer], Balancer, RedisServer, RedisServer, Sentinels]:
    primary = RedisServer(directory / "primary")
    stack.callback(primary.stop)
    replica = RedisServer(directory / "replica", replica_of=primary.port)
    stack.callback(replica.stop)
    wait_until(lambda: "master_link_status:up" in replica.command("info", "replication"), 30, "the replica syncs")
    sentinels = Sentinels(directory, SERVICE, primary.port)
    stack.callback(sentinels.stop)
    wait_until(lambda: sentinels.primary_port() == primary.port, 30, "the sentinels know the primary")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{
        "name": PIPELINE, "reasoner": {"base_url": upstream.base_url, "model": REASONER},
        "answer": {"base_url": upstream.base_url, "model": ANSWER}, "tools": {"functions": [LOOKUP]}}]}))
    env = {"DUET_STATE_URL": sentinels.url(), "DUET_STORE_TIMEOUT": "0.5", "DUET_API_KEYS": ""}
    if failover_wait is not None:
        env["DUET_STORE_FAILOVER_WAIT"] = str(failover_wait)
    with ThreadPoolExecutor(REPLICAS) as pool:
        starts = [pool.submit(DuetServer, ["--config", str(config)], env, directory / f"replica-{i}.log") for i in range(REPLICAS)]
        replicas = [start.result() for start in starts]
    for replica_server in replicas:
        stack.callback(lambda server=replica_server: server.process.poll() is None and server.stop())
    balancer = start_balancer([r.port for r in replicas], directory)
    stack.callback(balancer.stop)
    wait_for_states(balancer, {f"duet-{i + 1}": "UP" for i in range(REPLICAS)}, timeout=60)
    return replicas, balancer, primary, replica, sentinels


def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    with ExitStack() as stack, ScriptedUpstream() as upstream:
        upstream.set_default(mixed_rounds)
        replicas, balancer, primary, replica, sentinels = deploy(stack, directory, upstream, args.failover_wait)
        started = time.monotonic()
        load = Load(balancer.base_url, args.clients)
        try:
            time.sleep(args.seconds / 3)
            replicas[0].process.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            down = {f"duet-{i + 1}": "UP" for i in range(REPLICAS)} | {"duet-1": "DOWN"}
            wait_for_states(balancer, down, timeout=30)
            taken_out = time.monotonic() - killed_at
            time.sleep(max(args.seconds / 2 - (time.monotonic() - started), 0))
            primary.kill()
            primary_killed_at = time.monotonic()
            wait_until(lambda: sentinels.primary_port() == replica.port, 60, "the sentinels promote the replica")
            switched_at = time.monotonic()
            time.sleep(max(args.seconds - (time.monotonic() - started), 0))
        finally:
            done = load.stop()
        return figures(done, started, killed_at, taken_out, primary_killed_at, switched_at)


def figures(done: list[tuple[float, float, Conversation]], started: float, killed_at: float, taken_out: float,
            primary_killed_at: float, switched_at: float) -> dict[str, Any]:
    failed = [c for _, _, c in done if c.error]
    answered = [(began, ended, c) for began, ended, c in done if not c.error]
    restored_ones = [c for _, _, c in answered if restored(c.answer)]
    # Outside the store's failover: begun after the promotion had settled (2 s), or ended before the kill.
    outside = [c for began, ended, c in answered if ended < primary_killed_at or began > switched_at + 2.0]
    requests = 2 * len(done) - sum(1 for c in failed if not c.first_by)  # a failed first round sent no follow-up
    return {
        "conversations": len(done), "requests": requests, "requests_lost": len(failed),
        "errors": [c.error[:200] for c in failed],
        "follow_ups_restored": len(restored_ones), "follow_ups_answered": len(answered),
        "restored_ratio": round(len(restored_ones) / len(answered), 4) if answered else None,
        "restored_ratio_outside_failover": round(sum(restored(c.answer) for c in outside) / len(outside), 4) if outside else None,
        "replica_killed_after_s": round(killed_at - started, 1), "replica_taken_out_after_s": round(taken_out, 2),
        "primary_killed_after_s": round(primary_killed_at - started, 1), "failover_took_s": round(switched_at - primary_killed_at, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the load (default 60)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent conversations (default 8)")
    parser.add_argument("--failover-wait", type=float, default=None,
                        help="DUET_STORE_FAILOVER_WAIT for the replicas (default: Duet's; 0: no wait, as before it existed)")
    parser.add_argument("--label", default="", help="a note saved with the figures")
    args = parser.parse_args()
    record = begin("scale")
    with tempfile.TemporaryDirectory(prefix="duet-scale-") as directory:
        result = run(args, Path(directory))
    save(record, result, args, label=args.label)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
