"""Requests/s of ``duet serve --workers N``: streamed two-stage requests (N reasoning + N answer
tokens from the scripted upstream) at concurrency 16 and 64, for each worker count asked for, in
interleaved rounds (medians), with Duet's CPU per request summed over its processes.

Run from the repository root: ``python bench/workers.py`` (``--help`` for options). The upstream,
the client and Duet share the machine: on 2 cores, a second worker competes with both. The figures
go to ``bench/results/workers-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

import aiohttp
import httpx

from harness import cpu_seconds, served
from record import begin, save

CONCURRENCIES = (16, 64)
BODY = {"model": "duet", "stream": True, "messages": [{"role": "user", "content": "Plan a picnic for four."}]}


def process_tree(pid: int) -> list[int]:
    """``pid`` and its children (the workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *map(int, children)]


def wait_for_workers(base_url: str, count: int, timeout: float = 60) -> None:
    """Until ``count`` distinct worker pids have answered ``/health/ready`` (each has started)."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only workers {sorted(seen)} answered")
        try:
            seen.add(httpx.get(f"{base_url}/health/ready", timeout=2).json().get("pid", 0))
        except httpx.HTTPError:
            time.sleep(0.1)


async def requests_per_second(url: str, concurrency: int, seconds: float) -> float:
    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        deadline = time.perf_counter() + seconds

        async def client() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                async with session.post(url, json=BODY) as response:
                    assert response.status == 200, await response.text()
                    async for _ in response.content:
                        pass
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return done / (time.perf_counter() - start)


def measure(workers: int, args: argparse.Namespace) -> dict[str, float]:
    tokens = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens)]
    with served(tokens, {"DUET_WORKERS": str(workers)}) as services:
        wait_for_workers(services.base_url, workers)
        url = f"{services.base_url}/v1/chat/completions"
        asyncio.run(requests_per_second(url, 16, 1.0))  # warm-up: connections, caches, every worker
        results: dict[str, float] = {}
        for concurrency in CONCURRENCIES:
            pids = process_tree(services.duet.pid)
            cpu_before = sum(cpu_seconds(pid) for pid in pids)
            rate = asyncio.run(requests_per_second(url, concurrency, args.seconds))
            results[f"rps_c{concurrency}"] = rate
            results[f"cpu_ms_c{concurrency}"] = (sum(cpu_seconds(pid) for pid in pids) - cpu_before) / (rate * args.seconds) * 1000
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to compare (default 1 2)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; medians are reported")
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    run = begin("workers")
    runs: dict[int, list[dict[str, float]]] = {count: [] for count in args.workers}
    for _ in range(args.rounds):
        for count in args.workers:
            runs[count].append(measure(count, args))
    medians = {count: {key: statistics.median(one[key] for one in results) for key in results[0]} for count, results in runs.items()}
    save(run, {"rounds": runs, "medians": medians}, args)
    if args.json:
        print(json.dumps({"rounds": runs, "medians": medians}, indent=2))
        return
    print(f"streamed two-stage request, {args.tokens} + {args.tokens} tokens, {len(os.sched_getaffinity(0))} cores, "
          f"medians of {args.rounds} rounds")
    for count, figures in medians.items():
        print(f"  {count} worker(s)  " + "   ".join(
            f"c={c}: {figures[f'rps_c{c}']:.0f} req/s, {figures[f'cpu_ms_c{c}']:.2f} ms CPU/req" for c in CONCURRENCIES))


if __name__ == "__main__":
    main()
