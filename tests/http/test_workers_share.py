"""``duet serve --workers 2`` spreads new connections over its workers: each listens on a socket of its
own (``SO_REUSEPORT``), so connections opened at once do not all go to the worker that wakes first.
(The CPU each worker does under kept-alive load is measured by ``bench/workers_share.py``.)"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Barrier

import httpx
import pytest

from duet.api.server._workers import REUSE_PORT
from tests.conftest import ANSWER, REASONER, DuetServer
from tests.scripted_upstream import ScriptedUpstream
from tests.waiting import eventually

CONNECTIONS = 32
LISTEN = "0A"  # a socket's state in /proc/net/tcp


def listening_sockets(port: int) -> int:
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1].endswith(f":{port:04X}") and row.split()[3] == LISTEN)


@pytest.mark.skipif(not REUSE_PORT, reason="SO_REUSEPORT balances connections on Linux only")
def test_connections_opened_at_once_reach_both_workers(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    env = {"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER, "DUET_ANSWER_BASE_URL": upstream.base_url,
           "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": ""}
    server = DuetServer(["--workers", "2"], env, tmp_path / "duet.log")
    try:
        # The server is ready once a worker answers; the other may still be starting (a loaded machine),
        # and a socket not listening yet gets no connection: wait for both.
        eventually(lambda: listening_sockets(server.port) == 2, "both workers listening", timeout=30)
        together = Barrier(CONNECTIONS)

        def one_connection(_: int) -> int:
            together.wait(timeout=30)  # every connection is opened at the same moment
            with httpx.Client(base_url=server.base_url, timeout=30) as client:  # one kept-alive connection each
                answers = {int(client.get("/health/ready").json()["pid"]) for _ in range(3)}
            assert len(answers) == 1  # a connection stays with the worker that accepted it
            return answers.pop()

        with ThreadPoolExecutor(CONNECTIONS) as pool:
            served_by = list(pool.map(one_connection, range(CONNECTIONS)))
        counts = {pid: served_by.count(pid) for pid in set(served_by)}
        # Both workers accepted some (with one shared socket, the first awake took them all); a fair
        # hash leaves one of them without any once in 2^31 runs.
        assert len(counts) == 2 and server.process.pid not in counts, counts
        assert listening_sockets(server.port) == 2  # one per worker; the parent only holds the port
    finally:
        server.stop()
