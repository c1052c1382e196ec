"""Duet against the floor: the minimal two-stage relay and the upstream called directly, in one run.

Starts the scripted upstream (``tests/scripted_upstream.py``), ``duet serve`` and the minimal relay
(``bench/relay.py``) as separate processes on loopback, then measures, for a streamed two-stage
request (reasoning N tokens, then answer N tokens), in ``--rounds`` interleaved rounds (Duet, the
relay, Duet, the relay...; so a busy machine hits both alike), and prints the medians.

The upstream **paces** its tokens as a model does: one token per write, ``--pace-ms`` apart (2 ms by
default; the first right after the role chunk). Three request shapes, each on both servers:

- ``paced``: the request above, paced (the main figures);
- ``tool call``: paced, with one client tool, and the answer model calls it (the round ends in a
  tool call: the answer stage is the call's 4 argument fragments);
- ``burst``: the upstream writes a stage's tokens back to back (``[burst]`` in the question), a
  shape no model has, kept as a second figure (what one socket read brings is merged).

For each shape:

- own CPU per request (user + system time of the server process, from /proc) at c=1, 16 and 64;
- (paced only) time to first token (p50, c=1) and its overhead over the reasoning model's first token, direct:
  in each round Duet, the relay and the upstream called directly take turns of ``--ttft-block``
  requests, and each round's overhead is over that round's direct TTFT: the three figures of a ratio
  are measured within the same seconds, so the host's speed, which moves by the minute, cancels out;
- requests/s at c=1, 16 and 64 (direct: a client making both upstream calls itself);
- resident memory at rest (started, before any request) and after the runs, and its peak.

Ratios are Duet / relay. Run from the repository root: ``python bench/bench.py`` (``--help``); the
figures go to ``bench/results/bench-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from harness import (ANSWER, REASONER, chat_body, client_session, cpu_seconds, median, memory_mb, ratio, served,
                     stream_once, throughput)
from record import begin, save

CONCURRENCY = (1, 16, 64)
TOOL = {"type": "function", "function": {"name": "plan_trip", "description": "Plans a trip.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}
SHAPES: dict[str, dict[str, Any]] = {  # the request body of each shape (tests/scripted_upstream.py reads the marks)
    "paced": chat_body("duet"),
    "tool_call": chat_body("duet", [{"role": "user", "content": "Plan a trip to Paris. [call a tool]"}], [TOOL]),
    "burst": chat_body("duet", [{"role": "user", "content": "Plan a picnic for four. [burst]"}]),
}


async def direct_pair(session: Any, upstream: str) -> None:
    """What a client without Duet does: ask the reasoning model, then the answer model."""
    await stream_once(session, upstream, chat_body(REASONER))
    await stream_once(session, upstream, chat_body(ANSWER))


async def measure_ttft(args: argparse.Namespace, targets: dict[str, tuple[str, dict[str, Any]]], first_turn: int) -> dict[str, float]:
    """One round of TTFT (p50, ms, c=1) for each target (name → URL, body): ``--requests`` each (rounded
    to whole turns), in turns of ``--ttft-block`` requests. Which target goes first passes round from
    turn to turn, and on from round to round (``first_turn``: this round's first), so each target as
    often follows each other one and opens a round. Turns, not single requests: a request right after
    another server's is colder (the others ran on the cores in between), and a turn keeps that to its
    first few requests, as in a run of one server alone."""
    ttft: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    async with client_session() as http:
        for turn in range(first_turn, first_turn + ttft_turns(args)):
            at = turn % len(names)
            for name in names[at:] + names[:at]:
                url, body = targets[name]
                for _ in range(args.ttft_block):
                    ttft[name].append((await stream_once(http, url, body))[0])
    return {name: median(times) * 1000 for name, times in ttft.items()}


def ttft_turns(args: argparse.Namespace) -> int:
    return max(1, round(args.requests / args.ttft_block))


async def measure_server(args: argparse.Namespace, pid: int, url: str, body: dict[str, Any]) -> dict[str, float]:
    """One round of one server (Duet or the relay) on one shape: CPU at c=1, then throughput and CPU at c=16 and 64."""
    figures: dict[str, float] = {}
    async with client_session() as http:
        cpu_before = cpu_seconds(pid)
        start = time.perf_counter()
        for _ in range(args.requests):
            await stream_once(http, url, body)
        elapsed = time.perf_counter() - start
        figures["cpu_ms_c1"] = (cpu_seconds(pid) - cpu_before) / args.requests * 1000
        figures["rps_c1"] = args.requests / elapsed
    for concurrency in CONCURRENCY[1:]:
        async with client_session() as http:
            cpu_before = cpu_seconds(pid)
            done, elapsed = await throughput(lambda: stream_once(http, url, body), concurrency, args.seconds)
            figures[f"cpu_ms_c{concurrency}"] = (cpu_seconds(pid) - cpu_before) / max(1, done) * 1000
            figures[f"rps_c{concurrency}"] = done / elapsed
    return figures


async def measure_direct(args: argparse.Namespace, upstream: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    for concurrency in CONCURRENCY:
        async with client_session() as http:
            done, elapsed = await throughput(lambda: direct_pair(http, upstream), concurrency, args.seconds)
            figures[f"rps_c{concurrency}"] = done / elapsed
    return figures


async def measure(args: argparse.Namespace, servers: dict[str, tuple[int, str]], upstream: str) -> dict[str, Any]:
    """``servers``: name → (PID, chat completions URL). Medians over the rounds, per shape, name and figure."""
    shapes = [shape for shape in SHAPES if shape in args.shapes]
    rounds: dict[str, dict[str, list[dict[str, float]]]] = {shape: {name: [] for name in servers} for shape in shapes}
    direct_rounds: list[dict[str, float]] = []
    at_rest = {name: memory_mb(pid)[0] for name, (pid, _) in servers.items()}
    async with client_session() as warm:
        for _ in range(args.warmup):
            for _, url in servers.values():
                for shape in shapes:
                    await stream_once(warm, url, SHAPES[shape])
            await direct_pair(warm, upstream)
    ttft_targets = {**{name: (url, SHAPES["paced"]) for name, (_, url) in servers.items()}, "direct": (upstream, chat_body(REASONER))}
    for index in range(args.rounds):
        ttft = await measure_ttft(args, ttft_targets, first_turn=index * ttft_turns(args)) if "paced" in shapes else {}
        for shape in shapes:
            order = list(servers) if index % 2 == 0 else list(reversed(servers))  # who goes first alternates
            for name in order:
                pid, url = servers[name]
                figures = await measure_server(args, pid, url, SHAPES[shape])
                if shape == "paced":
                    figures |= {"ttft_ms": ttft[name], "ttft_overhead_ms": ttft[name] - ttft["direct"]}
                rounds[shape][name].append(figures)
        direct_rounds.append({**({"ttft_ms": ttft["direct"]} if ttft else {}), **await measure_direct(args, upstream)})
    results: dict[str, Any] = {shape: {name: {key: median([r[key] for r in runs]) for key in runs[0]} for name, runs in by_name.items()}
                               for shape, by_name in rounds.items()}
    results["direct"] = {key: median([r[key] for r in direct_rounds]) for key in direct_rounds[0]}
    for name, (pid, _) in servers.items():
        rss_after, rss_peak = memory_mb(pid)
        results.setdefault("memory", {})[name] = {"rss_at_rest_mb": at_rest[name], "rss_after_mb": rss_after, "rss_peak_mb": rss_peak}
    if "paced" in rounds:  # each round's TTFT ratio on its own: the spread behind the ratio of the medians in the table
        results["ttft_overhead_ratio_by_round"] = {
            str(index + 1): ratio(duet["ttft_overhead_ms"], relay["ttft_overhead_ms"])
            for index, (duet, relay) in enumerate(zip(rounds["paced"]["duet"], rounds["paced"]["relay"], strict=True))
        }
    return results


ROWS = [  # (label, figure, format, whether direct has it)
    ("own CPU ms per request, c=1", "cpu_ms_c1", "{:.2f}", False),
    ("own CPU ms per request, c=16", "cpu_ms_c16", "{:.2f}", False),
    ("own CPU ms per request, c=64", "cpu_ms_c64", "{:.2f}", False),
    ("TTFT p50 ms, c=1", "ttft_ms", "{:.2f}", True),
    ("TTFT overhead over direct, ms", "ttft_overhead_ms", "{:.2f}", False),
    ("requests/s, c=1", "rps_c1", "{:.0f}", True),
    ("requests/s, c=16", "rps_c16", "{:.0f}", True),
    ("requests/s, c=64", "rps_c64", "{:.0f}", True),
]
MEMORY_ROWS = [("RSS at rest, MB", "rss_at_rest_mb"), ("RSS after load, MB", "rss_after_mb"), ("RSS peak, MB", "rss_peak_mb")]


def table(results: dict[str, Any]) -> str:
    """The side-by-side table of each shape, in Markdown (it reads as plain text too)."""
    lines = ["| shape | | Duet | minimal relay | Duet / relay | direct |", "|---|---|---|---|---|---|"]
    for shape in SHAPES:
        if shape not in results:
            continue
        figures = results[shape]
        for label, key, form, direct in ROWS:
            if key not in figures["duet"]:
                continue
            duet, relay = figures["duet"][key], figures["relay"][key]
            shown_direct = form.format(results["direct"][key]) if direct and shape == "paced" else "–"
            lines.append(f"| {shape} | {label} | {form.format(duet)} | {form.format(relay)} | {ratio(duet, relay):.2f}× | {shown_direct} |")
    for label, key in MEMORY_ROWS:
        duet, relay = results["memory"]["duet"][key], results["memory"]["relay"][key]
        lines.append(f"| | {label} | {duet:.0f} | {relay:.0f} | {ratio(duet, relay):.2f}× | – |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--pace-ms", type=float, default=2.0, help="milliseconds between two tokens of the paced shapes (default 2)")
    parser.add_argument("--shapes", type=lambda text: text.split(","), default=list(SHAPES),
                        help=f"comma-separated shapes to measure (default {','.join(SHAPES)})")
    parser.add_argument("--requests", type=int, default=100, help="requests per round for the c=1 figures (TTFT, CPU)")
    parser.add_argument("--ttft-block", type=int, default=20,
                        help="TTFT requests to one target before the next takes its turn (--requests is rounded to whole turns)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each throughput run (c=16, c=64)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (Duet, relay, direct); medians are printed")
    parser.add_argument("--duet-env", action="append", default=[], metavar="DUET_X=value",
                        help="a setting for duet serve (repeatable), e.g. DUET_STATE_URL=memory://")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.ttft_block < 1 or args.requests < 1:
        parser.error("--ttft-block and --requests must be at least 1")
    if unknown := set(args.shapes) - set(SHAPES):
        parser.error(f"unknown shapes: {', '.join(sorted(unknown))}")

    run = begin("bench")
    load_before = run.load_before
    tokens = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens), "--delay-between", str(args.pace_ms / 1000)]
    with served(tokens, env=dict(setting.split("=", 1) for setting in args.duet_env), relay=True) as services:
        servers = {"duet": (services.duet.pid, f"{services.base_url}/v1/chat/completions"),
                   "relay": (services.relay.pid, f"{services.relay_url}/v1/chat/completions")}  # type: ignore[union-attr]
        results = asyncio.run(measure(args, servers, f"{services.upstream_base}/chat/completions"))
    load_after = os.getloadavg()
    save(run, results, args)
    if args.json:
        print(json.dumps({**results, "load_average": {"before": load_before, "after": load_after}}, indent=2))
        return
    print(f"streamed two-stage request, {args.tokens} reasoning + {args.tokens} answer tokens, paced {args.pace_ms:g} ms apart "
          f"(burst: back to back); {os.cpu_count()} cores; medians of {args.rounds} interleaved rounds ({args.requests} requests at c=1, TTFT in turns of {args.ttft_block}; "
          f"{args.seconds:g} s at c=16 and c=64)")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(table(results))
    if "ttft_overhead_ratio_by_round" in results:
        print("TTFT overhead, Duet / relay, by round: " + ", ".join(f"{r:.2f}×" for r in results["ttft_overhead_ratio_by_round"].values()))


if __name__ == "__main__":
    main()
