"""Duet's overhead against calling the upstream models directly.

Starts the scripted upstream (``tests/scripted_upstream.py``) and ``duet serve`` as separate
processes on loopback, then measures, for a streamed two-stage request (reasoning N tokens, then
answer N tokens):

- time to first token: Duet's first reasoning delta vs the reasoning model's first delta, direct;
- requests/s at concurrency 1 and 16: through Duet vs a client making both upstream calls itself;
- Duet's own CPU time per request (user + system time of the ``duet`` process, from /proc);
- Duet's memory: resident set size at start, after all runs, and its peak.

Run from the repository root: ``python bench/bench.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import aiohttp

from harness import ANSWER, REASONER, cpu_seconds, memory_mb, served


class Client:
    """Streams one chat completion and notes when the first token and the end arrive."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def stream(self, url: str, model: str) -> tuple[float, float]:
        body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "Plan a picnic for four."}]}
        start = time.perf_counter()
        first = 0.0
        async with self.session.post(url, json=body) as response:
            assert response.status == 200, await response.text()
            async for line in response.content:
                if not first and (b'"reasoning_content"' in line or b'"content":"' in line and b'"content":""' not in line):
                    first = time.perf_counter() - start
        return first, time.perf_counter() - start


async def direct_pair(client: Client, upstream: str) -> tuple[float, float]:
    """What a client without Duet does: ask the reasoning model, then the answer model."""
    first, _ = await client.stream(upstream, REASONER)
    _, _ = await client.stream(upstream, ANSWER)
    return first, 0.0


async def throughput(call, concurrency: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - start)


async def measure(args: argparse.Namespace, duet_pid: int, duet_url: str, upstream_url: str) -> dict[str, float]:
    results: dict[str, float] = {}

    def session() -> aiohttp.ClientSession:
        # A session per phase: a connection left idle through another phase may be closed by the
        # server's keep-alive timeout just as it is reused, which would fail a request spuriously.
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    results["duet_rss_started_mb"] = memory_mb(duet_pid)[0]
    async with session() as warm:
        client = Client(warm)
        for _ in range(args.warmup):
            await client.stream(duet_url, "duet")
            await direct_pair(client, upstream_url)

    async with session() as http:
        client = Client(http)
        ttft_direct = [(await client.stream(upstream_url, REASONER))[0] for _ in range(args.requests)]
    async with session() as http:
        client = Client(http)
        ttft_duet = [(await client.stream(duet_url, "duet"))[0] for _ in range(args.requests)]
        cpu_before = cpu_seconds(duet_pid)
        for _ in range(args.requests):
            await client.stream(duet_url, "duet")
        results["duet_cpu_ms_per_request"] = (cpu_seconds(duet_pid) - cpu_before) / args.requests * 1000
    results["ttft_direct_ms"] = statistics.median(ttft_direct) * 1000
    results["ttft_duet_ms"] = statistics.median(ttft_duet) * 1000
    results["ttft_overhead_ms"] = results["ttft_duet_ms"] - results["ttft_direct_ms"]

    for concurrency in (1, 16):
        async with session() as http:
            client = Client(http)
            results[f"rps_direct_c{concurrency}"] = await throughput(lambda c=client: direct_pair(c, upstream_url), concurrency, args.seconds)
        async with session() as http:
            client = Client(http)
            results[f"rps_duet_c{concurrency}"] = await throughput(lambda c=client: c.stream(duet_url, "duet"), concurrency, args.seconds)
    results["duet_rss_after_mb"], results["duet_rss_peak_mb"] = memory_mb(duet_pid)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--requests", type=int, default=300, help="requests for the TTFT and CPU figures")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    tokens = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens)]
    with served(tokens) as services:
        results = asyncio.run(
            measure(args, services.duet.pid, f"{services.base_url}/v1/chat/completions", f"{services.upstream_base}/chat/completions")
        )
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"streamed two-stage request, {args.tokens} reasoning + {args.tokens} answer tokens, {os.cpu_count()} cores")
    print(f"  time to first token   direct {results['ttft_direct_ms']:.2f} ms   duet {results['ttft_duet_ms']:.2f} ms   overhead {results['ttft_overhead_ms']:.2f} ms")
    print(f"  duet CPU per request  {results['duet_cpu_ms_per_request']:.2f} ms")
    for c in (1, 16):
        print(f"  requests/s c={c:<3}      direct {results[f'rps_direct_c{c}']:.1f}   duet {results[f'rps_duet_c{c}']:.1f}")
    print(f"  duet memory (RSS)     started {results['duet_rss_started_mb']:.0f} MB   after the runs "
          f"{results['duet_rss_after_mb']:.0f} MB   peak {results['duet_rss_peak_mb']:.0f} MB")


if __name__ == "__main__":
    main()
