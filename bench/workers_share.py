"""Do the workers share the load? ``duet serve --workers 2``; 8 kept-alive connections opened at once,
each then sending streamed two-stage requests back to back; each worker's share of the CPU the workers
spent (from /proc), and the requests per second.

With one listening socket shared by the workers, the worker that wakes first accepts every connection
waiting, and keeps them: it does nearly all the work. With a socket per worker (``SO_REUSEPORT``, Duet's
way on Linux) the kernel spreads the connections. Both are measured in interleaved rounds (A, B, A, B):
``before``, the shared socket (``bench/serve_shared_socket.py``), and ``after``, a socket per worker.

Run from the repository root: ``.venv/bin/python bench/workers_share.py``.
The figures go to ``bench/results/workers_share-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import aiohttp
import httpx

from harness import DUET, cpu_seconds, served
from record import begin, save

CONNECTIONS = 8
WORKERS = 2
ESTABLISHED = "01"  # a socket's state in /proc/net/tcp
BODY = {"model": "duet", "stream": True, "messages": [{"role": "user", "content": "Plan a picnic for four."}]}


SHARED_SOCKET = (sys.executable, str(Path(__file__).parent / "serve_shared_socket.py"))


def worker_pids(base_url: str, count: int, timeout: float = 120) -> list[int]:
    """The pids of the ``count`` workers, as ``/health/ready`` names them on new connections."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only workers {sorted(seen)} answered")
        with contextlib.suppress(httpx.HTTPError):
            seen.add(httpx.get(f"{base_url}/health/ready", timeout=5).json()["pid"])
    return sorted(seen)


def connections_of(pid: int, port: int) -> int:
    """Established connections to ``port`` that process ``pid`` holds (its sockets in /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1].endswith(f":{port:04X}") and row.split()[3] == ESTABLISHED
               and row.split()[9] in inodes)


async def keep_alive_load(url: str, seconds: float, count_connections: Callable[[], dict[int, int]]) -> tuple[int, dict[int, int]]:
    """``CONNECTIONS`` clients on as many kept-alive connections, all opened at once: requests done,
    and each worker's connections once all are open."""
    done = 0
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        opened = asyncio.Barrier(CONNECTIONS)
        first_done = asyncio.Barrier(CONNECTIONS + 1)

        async def client() -> None:
            nonlocal done
            await opened.wait()  # every client's first request (its connection) starts at the same moment
            deadline = time.perf_counter() + seconds
            first = True
            while time.perf_counter() < deadline:
                async with session.post(url, json=BODY) as response:
                    assert response.status == 200, await response.text()
                    async for _ in response.content:
                        pass
                done += 1
                if first:
                    first = False
                    await first_done.wait()

        tasks = [asyncio.ensure_future(client()) for _ in range(CONNECTIONS)]
        await first_done.wait()
        held = await asyncio.to_thread(count_connections)
        await asyncio.gather(*tasks)
    return done, held


def measure(command: Sequence[str], args: argparse.Namespace) -> dict[str, object]:
    tokens = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens)]
    with served(tokens, {"DUET_WORKERS": str(WORKERS)}, command=command, start_timeout=120) as services:
        workers = worker_pids(services.base_url, WORKERS)
        before = {pid: cpu_seconds(pid) for pid in workers}
        started = time.perf_counter()
        done, held = asyncio.run(keep_alive_load(f"{services.base_url}/v1/chat/completions", args.seconds,
                                                 lambda: {pid: connections_of(pid, services.port) for pid in workers}))
        elapsed = time.perf_counter() - started
        spent = {pid: cpu_seconds(pid) - before[pid] for pid in workers}
    total = sum(spent.values()) or float("nan")
    shares = sorted((seconds / total for seconds in spent.values()), reverse=True)
    return {"requests_per_second": done / elapsed, "cpu_seconds": sorted(spent.values(), reverse=True), "shares": shares,
            "smallest_share": shares[-1], "connections": sorted(held.values(), reverse=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of load per measurement (default 8)")
    parser.add_argument("--label", default="", help="a note saved with the figures")
    args = parser.parse_args()

    variants: dict[str, Sequence[str]] = {"before": SHARED_SOCKET, "after": (DUET,)}
    run = begin("workers_share")
    rounds: dict[str, list[dict[str, object]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name in variants:  # before, after, before, after: the same conditions for both
            rounds[name].append(measure(variants[name], args))
    summary = {name: {"smallest_share": min(float(r["smallest_share"]) for r in results),  # type: ignore[arg-type]
                      "shares": [[round(share, 2) for share in r["shares"]] for r in results],  # type: ignore[attr-defined]
                      "connections": [r["connections"] for r in results],
                      "requests_per_second": [round(float(r["requests_per_second"]), 1) for r in results]}  # type: ignore[arg-type]
               for name, results in rounds.items()}
    save(run, {"rounds": rounds, "summary": summary, "commands": variants}, args, label=args.label)
    print(json.dumps(summary, indent=2))
    for name, figures in summary.items():
        print(f"{name}: the least busy worker's share of the CPU in the worst round: {figures['smallest_share']:.0%}")


if __name__ == "__main__":
    main()
