"""Do the workers share the load? ``duet serve --workers 2``; 8 kept-alive connections opened at once,
each then sending streamed two-stage requests back to back; each worker's share of the CPU the workers
spent (from /proc), and the requests per second.

With one listening socket shared by the workers, the worker that wakes first accepts every connection
waiting, and keeps them: it does nearly all the work. With a socket per worker (``SO_REUSEPORT``, Duet's
way on Linux) the kernel spreads the connections. ``--before PATH`` runs another checkout's ``duet``
(say, one without the change) in interleaved rounds with this one's (A, B, A, B).

Run from the repository root: ``.venv/bin/python bench/workers_share.py [--before /path/to/.venv/bin/duet]``.
The figures go to ``bench/results/workers_share-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp

from harness import DUET, cpu_seconds, served
from record import begin, save
from workers import process_tree, wait_for_workers

CONNECTIONS = 8
WORKERS = 2
BODY = {"model": "duet", "stream": True, "messages": [{"role": "user", "content": "Plan a picnic for four."}]}


async def keep_alive_load(url: str, seconds: float) -> int:
    """``CONNECTIONS`` clients on as many kept-alive connections, all opened at once; requests done."""
    done = 0
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        opened = asyncio.Barrier(CONNECTIONS)

        async def client() -> None:
            nonlocal done
            await opened.wait()  # every client's first request (its connection) starts at the same moment
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                async with session.post(url, json=BODY) as response:
                    assert response.status == 200, await response.text()
                    async for _ in response.content:
                        pass
                done += 1

        await asyncio.gather(*(client() for _ in range(CONNECTIONS)))
    return done


def measure(command: str, args: argparse.Namespace) -> dict[str, object]:
    tokens = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens)]
    with served(tokens, {"DUET_WORKERS": str(WORKERS)}, command=command) as services:
        wait_for_workers(services.base_url, WORKERS)
        workers = process_tree(services.duet.pid)[1:]
        before = {pid: cpu_seconds(pid) for pid in workers}
        started = time.perf_counter()
        done = asyncio.run(keep_alive_load(f"{services.base_url}/v1/chat/completions", args.seconds))
        elapsed = time.perf_counter() - started
        spent = {pid: cpu_seconds(pid) - before[pid] for pid in workers}
    total = sum(spent.values()) or float("nan")
    shares = sorted((seconds / total for seconds in spent.values()), reverse=True)
    return {"requests_per_second": done / elapsed, "cpu_seconds": sorted(spent.values(), reverse=True),
            "shares": shares, "smallest_share": shares[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="another checkout's duet console script, measured in turn with this one's")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of load per measurement (default 8)")
    parser.add_argument("--label", default="", help="a note saved with the figures")
    args = parser.parse_args()

    variants = {"after": DUET, **({"before": args.before} if args.before else {})}
    run = begin("workers_share")
    rounds: dict[str, list[dict[str, object]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name in sorted(variants):  # after, before, after, before: the same conditions for both
            rounds[name].append(measure(variants[name], args))
    summary = {name: {"smallest_share": min(float(r["smallest_share"]) for r in results),  # type: ignore[arg-type]
                      "requests_per_second": [round(float(r["requests_per_second"]), 1) for r in results]}  # type: ignore[arg-type]
               for name, results in rounds.items()}
    save(run, {"rounds": rounds, "summary": summary, "commands": variants}, args, label=args.label)
    print(json.dumps(summary, indent=2))
    for name, figures in summary.items():
        print(f"{name}: the least busy worker's share of the CPU in the worst round: {figures['smallest_share']:.0%}")


if __name__ == "__main__":
    main()
