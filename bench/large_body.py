"""Does one large request body stall every other client? The event-loop stall while Duet reads one.

Starts the scripted upstream and a fresh ``duet serve`` per case, then sends one large body while
a probe client sends small requests (``GET /v1/models``, answered on the event loop with no model
call) back to back. The probe's worst latency during the large request is how long every other
client waited. Also reported: the large request's status and time, and Duet's memory growth.

Cases (each is refused before any model runs, so what is measured is reading the body):

- ``200k-empty-messages``: 200,000 ``{"role":"user","content":""}`` (the issue's 5.8 MB body);
- ``30mb-text``: 4,096 messages of 7.3 KB, refused only after the messages were converted, by a
  ``tool_choice`` naming a missing tool;
- ``30mb-tiny-values``: a valid request with an extra field of 10 million empty arrays (the
  body that takes longest to parse per byte).

Run from the repository root: ``python bench/large_body.py`` (``--help`` for options). The figures go
to ``bench/results/large_body-<time>.json`` (``record.py``).
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

from harness import memory_mb, served
from record import begin, save

ROOT = Path(__file__).resolve().parent.parent
USER = {"role": "user", "content": ""}
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def cases() -> dict[str, bytes]:
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 128  # 7.3 KB
    return {
        "200k-empty-messages": json.dumps({"model": "duet", "messages": [USER] * 200_000}).encode(),
        "30mb-text": json.dumps({
            "model": "duet", "messages": [{"role": "user", "content": text}] * 4096, "tools": [LOOKUP],
            "tool_choice": {"type": "function", "function": {"name": "missing"}},
        }).encode(),
        "30mb-tiny-values": json.dumps({"model": "duet", "messages": [{"role": "user", "content": "hi"}], "extra": [[]] * 10_000_000}).encode(),
    }


async def probe(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> list[float]:
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        async with session.get(url) as response:
            await response.read()
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.002)
    return latencies


async def measure(base: str, body: bytes) -> dict[str, float]:
    async with aiohttp.ClientSession() as probe_session, aiohttp.ClientSession() as big_session:
        idle_stop = asyncio.Event()
        idle = asyncio.create_task(probe(probe_session, f"{base}/v1/models", idle_stop))
        await asyncio.sleep(0.5)
        idle_stop.set()
        idle_latencies = await idle
        stop = asyncio.Event()
        during = asyncio.create_task(probe(probe_session, f"{base}/v1/models", stop))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        async with big_session.post(f"{base}/v1/chat/completions", data=body, headers={"content-type": "application/json"}) as response:
            answer = await response.read()
            status = response.status
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.05)
        stop.set()
        latencies = await during
    return {
        "status": status,
        "code": json.loads(answer).get("error", {}).get("code") if status != 200 else None,
        "request_s": elapsed,
        "probe_idle_max_ms": max(idle_latencies) * 1000,
        "probe_p50_ms": statistics.median(latencies) * 1000,
        "probe_max_ms": max(latencies) * 1000,
        "probes": len(latencies),
    }


def run_case(name: str, body: bytes) -> dict[str, float]:
    with served(env={"DUET_STATE_URL": "memory://"}) as services:
        rss_before, _ = memory_mb(services.duet.pid)
        result = asyncio.run(measure(services.base_url, body))
        rss_after, peak = memory_mb(services.duet.pid)
        return result | {"body_mb": len(body) / 1e6, "rss_before_mb": rss_before, "rss_after_mb": rss_after, "rss_peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="run only these cases (default: all)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    run = begin("large_body")
    bodies = cases()
    results = {name: run_case(name, body) for name, body in bodies.items() if not args.case or name in args.case}
    save(run, results, args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"one large body while a probe client sends GET /v1/models back to back ({os.cpu_count()} cores)")
    for name, r in results.items():
        print(f"  {name:<20} {r['body_mb']:5.1f} MB  -> HTTP {r['status']} {r['code'] or ''} in {r['request_s'] * 1000:.0f} ms; "
              f"probe worst {r['probe_max_ms']:.0f} ms (idle worst {r['probe_idle_max_ms']:.0f} ms, p50 {r['probe_p50_ms']:.1f} ms, "
              f"n={r['probes']}); RSS {r['rss_before_mb']:.0f} -> {r['rss_after_mb']:.0f} MB, peak {r['rss_peak_mb']:.0f} MB")


if __name__ == "__main__":
    main()
