"""How Duet's cost grows with the work, against the minimal relay (``bench/relay.py``), in one run.

Starts the scripted upstream, ``duet serve`` and the relay as separate processes on loopback (see
``harness.py``) and measures, for Duet and the relay alike:

- own CPU per streamed two-stage request (40 + 40 tokens, c=1) with a conversation history of
  2 / 50 / 200 messages, and with 1 / 32 / 128 client tools, the answer being text or a call of
  one of them; interleaved rounds (``--rounds``), medians;
- memory per open slow stream: ``--streams`` requests held open at once by an upstream that waits
  ``--delay-between`` seconds between two chunks (a second scripted upstream); the growth of the
  server's resident memory over its level after a warm-up, at its highest while they are open,
  divided by the number of streams; and the streams' median duration.

Ratios are Duet / relay. Run from the repository root: ``python bench/growth.py`` (``--help``); only
the memory case: ``python bench/growth.py --history "" --tools ""``. The figures go to
``bench/results/growth-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from harness import chat_body, client_session, cpu_seconds, median, memory_mb, ratio, served, stream_once
from record import begin, save

TOOL_CALL_MARK = "[call a tool]"  # tests/scripted_upstream.py: BENCH_TOOL_CALL_MARK
SENTENCE = "We could meet at the lake on Saturday; bring sandwiches, fruit, water and a blanket for four people. "


def history(length: int) -> list[dict[str, Any]]:
    """A system message, then users and assistants taking turns, a user last: ``length`` messages."""
    turns = length - 1
    return [{"role": "system", "content": "You plan outings."}] + [
        {"role": "user" if (turns - 1 - i) % 2 == 0 else "assistant", "content": f"Message {i}. {SENTENCE}"} for i in range(turns)]


def tools(count: int) -> list[dict[str, Any]]:
    """``count`` client tools of a usual size (a description, three typed parameters)."""
    return [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Looks up item {i} of the outing: weather, places or prices.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "Where."},
            "days": {"type": "integer", "description": "How many days ahead."},
            "unit": {"type": "string", "enum": ["metric", "imperial"]}}, "required": ["city"]}}} for i in range(count)]


def cases(histories: list[int], tool_counts: list[int]) -> dict[str, dict[str, Any]]:
    """Each request measured, by its label."""
    found = {f"history {n} messages": chat_body("duet", history(n)) for n in histories}
    for n in tool_counts:
        name = f"{n} tool{'s' if n != 1 else ''}"
        found[f"{name}, text answer"] = chat_body("duet", tools=tools(n))
        found[f"{name}, tool call"] = chat_body("duet", [{"role": "user", "content": f"Weather for the picnic? {TOOL_CALL_MARK}"}], tools(n))
    return found


async def cpu_per_request(pid: int, url: str, body: dict[str, Any], requests: int) -> float:
    async with client_session() as http:
        for _ in range(3):  # the first requests of a shape warm caches on both sides
            await stream_once(http, url, body)
        before = cpu_seconds(pid)
        for _ in range(requests):
            await stream_once(http, url, body)
        return (cpu_seconds(pid) - before) / requests * 1000


async def measure_cpu(args: argparse.Namespace, servers: dict[str, tuple[int, str]]) -> dict[str, dict[str, float]]:
    """Label → server → median CPU ms per request over the interleaved rounds."""
    requests = cases(args.history, args.tools)
    runs: dict[str, dict[str, list[float]]] = {label: {name: [] for name in servers} for label in requests}
    for _ in range(args.rounds):
        for label, body in requests.items():
            for name, (pid, url) in servers.items():
                runs[label][name].append(await cpu_per_request(pid, url, body, args.requests))
    return {label: {name: median(values) for name, values in by_server.items()} for label, by_server in runs.items()}


async def open_streams(pid: int, url: str, count: int) -> tuple[float, float]:
    """``count`` slow streams open at once: the resident memory at its highest meanwhile (MB), and
    the streams' median duration (s)."""
    async with client_session() as http:
        tasks = [asyncio.ensure_future(stream_once(http, url, chat_body("duet"))) for _ in range(count)]
        highest = memory_mb(pid)[0]
        while not all(task.done() for task in tasks):
            await asyncio.sleep(0.2)
            highest = max(highest, memory_mb(pid)[0])
        durations = [task.result()[1] for task in tasks]
    return highest, median(durations)


async def measure_memory(args: argparse.Namespace, servers: dict[str, tuple[int, str]]) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for name, (pid, url) in servers.items():
        await open_streams(pid, url, min(args.streams, 32))  # warm-up: the pools, buffers and caches a stream needs once
        await asyncio.sleep(1)
        rest = memory_mb(pid)[0]
        highest, duration = await open_streams(pid, url, args.streams)
        figures[name] = {"rss_rest_mb": rest, "rss_highest_mb": highest, "kb_per_stream": (highest - rest) * 1024 / args.streams,
                         "stream_p50_s": duration}
    return figures


def servers_of(services: Any) -> dict[str, tuple[int, str]]:
    return {"duet": (services.duet.pid, f"{services.base_url}/v1/chat/completions"),
            "relay": (services.relay.pid, f"{services.relay_url}/v1/chat/completions")}


def cpu_table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| request (40 + 40 tokens, c=1) | Duet CPU ms | relay CPU ms | Duet / relay |", "|---|---|---|---|"]
    lines += [f"| {label} | {r['duet']:.2f} | {r['relay']:.2f} | {ratio(r['duet'], r['relay']):.2f}× |" for label, r in results.items()]
    return "\n".join(lines)


def memory_table(results: dict[str, dict[str, float]], streams: int) -> str:
    duet, relay = results["duet"], results["relay"]
    rows = [(f"memory per open slow stream, KB ({streams} open)", "kb_per_stream", "{:.0f}"),
            ("RSS before the streams, MB", "rss_rest_mb", "{:.0f}"),
            ("RSS at most while they are open, MB", "rss_highest_mb", "{:.0f}"),
            ("stream duration p50, s", "stream_p50_s", "{:.2f}")]
    lines = ["| | Duet | relay | Duet / relay |", "|---|---|---|---|"]
    lines += [f"| {label} | {form.format(duet[key])} | {form.format(relay[key])} | {ratio(duet[key], relay[key]):.2f}× |"
              for label, key, form in rows]
    return "\n".join(lines)


def numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]  # "": none (only the memory case: --history "" --tools "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100, help="requests per case, server and round (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are printed (default 3)")
    parser.add_argument("--history", type=numbers, default=[2, 50, 200], help="history lengths (default 2,50,200; \"\": none)")
    parser.add_argument("--tools", type=numbers, default=[1, 32, 128], help="client tool counts (default 1,32,128; \"\": none)")
    parser.add_argument("--streams", type=int, default=200, help="slow streams held open at once (default 200; 0: skip)")
    parser.add_argument("--delay-between", type=float, default=0.1, help="the slow upstream's seconds between chunks (default 0.1)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    run = begin("growth")
    load_before = run.load_before
    started = time.monotonic()
    cpu: dict[str, dict[str, float]] = {}
    if args.history or args.tools:
        with served(relay=True) as services:
            cpu = asyncio.run(measure_cpu(args, servers_of(services)))
    memory: dict[str, dict[str, float]] = {}
    if args.streams:
        # Duet's cap on completions at once must not turn streams away.
        env = {"DUET_MAX_CONCURRENT_REQUESTS": str(max(256, args.streams + 16))}
        with served(["--delay-between", str(args.delay_between)], env, relay=True) as services:
            memory = asyncio.run(measure_memory(args, servers_of(services)))
    load_after = os.getloadavg()
    save(run, {"cpu_ms_per_request": cpu, "memory": memory}, args)
    if args.json:
        print(json.dumps({"cpu_ms_per_request": cpu, "memory": memory, "load_average": {"before": load_before, "after": load_after}}, indent=2))
        return
    print(f"growth: Duet against the minimal relay; {os.cpu_count()} cores; medians of {args.rounds} interleaved rounds of "
          f"{args.requests} requests; load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
          f"{time.monotonic() - started:.0f} s")
    if cpu:
        print(cpu_table(cpu))
    if memory:
        print()
        print(f"{args.streams} streams open at once, the upstream sending a chunk every {args.delay_between:g} s "
              f"(40 + 40 tokens: ~{82 * args.delay_between:.0f} s a stream)")
        print(memory_table(memory, args.streams))


if __name__ == "__main__":
    main()
