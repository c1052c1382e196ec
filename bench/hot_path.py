"""Duet's CPU per request for a request of a given shape: history length and number of client tools.

Starts the scripted upstream and ``duet serve`` (``harness.py``) and streams two-stage requests
with ``--history`` messages (user and assistant turns, ending with a user turn) and ``--tools``
client tools, then prints Duet's own CPU time per request (user + system, from /proc) at
concurrency 1 and ``--concurrency``, and the median time to first token at concurrency 1.
``--profile FILE`` also records Duet with py-spy (collapsed stacks) during the concurrent run.

Run from the repository root: ``python bench/hot_path.py --history 200 --tools 128``. The figures go
to ``bench/results/hot_path-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from harness import cpu_seconds, served
from record import begin, save


def request_body(history: int, tools: int) -> dict[str, Any]:
    """``history`` messages: a system message, then user and assistant turns ending with a user turn."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    turns = max(1, history - 1)
    turns += 1 - turns % 2  # an odd number of turns starts and ends with the user
    for index in range(turns - 1):
        role = "user" if index % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"Message {index}: a sentence of ordinary length about the picnic."})
    messages.append({"role": "user", "content": "Plan a picnic for four."})
    body: dict[str, Any] = {"model": "duet", "stream": True, "messages": messages}
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": f"tool_{index}",
                    "description": f"Tool number {index}: looks something up.",
                    "parameters": {
                        "type": "object",
                        "properties": {"query": {"type": "string", "description": "what to look up"},
                                       "limit": {"type": "integer", "minimum": 1}},
                        "required": ["query"],
                    },
                },
            }
            for index in range(tools)
        ]
    return body


async def stream(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    start = time.perf_counter()
    first = 0.0
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if not first and (b'"reasoning_content"' in line or (b'"content":"' in line and b'"content":""' not in line)):
                first = time.perf_counter() - start
    return first


async def concurrent(url: str, body: bytes, concurrency: int, seconds: float) -> int:
    done = 0
    deadline = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await stream(session, url, body)
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


async def measure(args: argparse.Namespace, pid: int, url: str) -> dict[str, float]:
    body = json.dumps(request_body(args.history, args.tools)).encode()
    results: dict[str, float] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for _ in range(args.warmup):
            await stream(session, url, body)
        before = cpu_seconds(pid)
        ttft = [await stream(session, url, body) for _ in range(args.requests)]
        results["cpu_ms_c1"] = (cpu_seconds(pid) - before) / args.requests * 1000
        results["ttft_ms_c1"] = statistics.median(ttft) * 1000
    profiler = None
    if args.profile:
        py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"  # a venv's own
        profiler = subprocess.Popen([py_spy, "record", "--format", "raw", "--output", args.profile, "--rate", "200",
                                     "--duration", str(int(args.seconds)), "--pid", str(pid), "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before = cpu_seconds(pid)
    done = await concurrent(url, body, args.concurrency, args.seconds)
    results[f"cpu_ms_c{args.concurrency}"] = (cpu_seconds(pid) - before) / done * 1000
    results[f"rps_c{args.concurrency}"] = done / args.seconds
    if profiler is not None:
        profiler.wait(60)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=2, help="messages in the request (default 2)")
    parser.add_argument("--tools", type=int, default=0, help="client tools in the request (default 0)")
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--requests", type=int, default=200, help="sequential requests for the c=1 figures")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the concurrent run")
    parser.add_argument("--profile", help="record Duet with py-spy (raw collapsed stacks) into this file during the concurrent run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    run = begin("hot_path")
    with served(["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens)]) as services:
        results = asyncio.run(measure(args, services.duet.pid, f"{services.base_url}/v1/chat/completions"))
    save(run, results, args)
    if args.json:
        print(json.dumps(results))
        return
    c = args.concurrency
    print(f"history {args.history}, tools {args.tools}: CPU per request c=1 {results['cpu_ms_c1']:.2f} ms, "
          f"c={c} {results[f'cpu_ms_c{c}']:.2f} ms; TTFT p50 c=1 {results['ttft_ms_c1']:.2f} ms; "
          f"req/s c={c} {results[f'rps_c{c}']:.0f}")


if __name__ == "__main__":
    main()
