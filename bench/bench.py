"""Duet against the floor: the minimal two-stage relay and the upstream called directly, in one run.

Starts the scripted upstream (``tests/scripted_upstream.py``), ``duet serve`` and the minimal relay
(``bench/relay.py``) as separate processes on loopback, then measures, for a streamed two-stage
request (reasoning N tokens, then answer N tokens), in ``--rounds`` interleaved rounds (Duet, the
relay, Duet, the relay...; so a busy machine hits both alike), and prints the medians:

- own CPU per request (user + system time of the server process, from /proc) at c=1 and c=16;
- time to first token (p50, c=1) and its overhead over the reasoning model's first token, direct:
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


async def measure_server(args: argparse.Namespace, pid: int, url: str) -> dict[str, float]:
    """One round of one server (Duet or the relay): CPU at c=1, then throughput and CPU at c=16 and 64."""
    figures: dict[str, float] = {}
    body = chat_body("duet")
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


async def measure(args: argparse.Namespace, servers: dict[str, tuple[int, str]], upstream: str) -> dict[str, dict[str, float]]:
    """``servers``: name → (PID, chat completions URL). Medians over the rounds, per name and figure."""
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in (*servers, "direct")}
    at_rest = {name: memory_mb(pid)[0] for name, (pid, _) in servers.items()}
    async with client_session() as warm:
        for _ in range(args.warmup):
            for _, url in servers.values():
                await stream_once(warm, url, chat_body("duet"))
            await direct_pair(warm, upstream)
    ttft_targets = {**{name: (url, chat_body("duet")) for name, (_, url) in servers.items()}, "direct": (upstream, chat_body(REASONER))}
    for index in range(args.rounds):
        ttft = await measure_ttft(args, ttft_targets, first_turn=index * ttft_turns(args))
        for name, (pid, url) in servers.items():
            rounds[name].append({"ttft_ms": ttft[name], **await measure_server(args, pid, url)})
        rounds["direct"].append({"ttft_ms": ttft["direct"], **await measure_direct(args, upstream)})
    for name in servers:  # over the direct TTFT of the same round: the two were measured in the same seconds
        for figures, direct in zip(rounds[name], rounds["direct"], strict=True):
            figures["ttft_overhead_ms"] = figures["ttft_ms"] - direct["ttft_ms"]
    results = {name: {key: median([r[key] for r in runs]) for key in runs[0]} for name, runs in rounds.items()}
    for name, (pid, _) in servers.items():
        results[name]["rss_at_rest_mb"] = at_rest[name]
        results[name]["rss_after_mb"], results[name]["rss_peak_mb"] = memory_mb(pid)
    # Each round's TTFT ratio on its own: the spread behind the ratio of the medians in the table.
    results["ttft_overhead_ratio_by_round"] = {
        str(index + 1): ratio(duet["ttft_overhead_ms"], relay["ttft_overhead_ms"])
        for index, (duet, relay) in enumerate(zip(rounds["duet"], rounds["relay"], strict=True))
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
    ("RSS at rest, MB", "rss_at_rest_mb", "{:.0f}", False),
    ("RSS after load, MB", "rss_after_mb", "{:.0f}", False),
    ("RSS peak, MB", "rss_peak_mb", "{:.0f}", False),
]


def table(results: dict[str, dict[str, float]]) -> str:
    """The side-by-side table, in Markdown (it reads as plain text too)."""
    lines = ["| | Duet | minimal relay | Duet / relay | direct |", "|---|---|---|---|---|"]
    for label, key, form, direct in ROWS:
        duet, relay = results["duet"][key], results["relay"][key]
        lines.append(f"| {label} | {form.format(duet)} | {form.format(relay)} | {ratio(duet, relay):.2f}× | "
                     f"{form.format(results['direct'][key]) if direct else '–'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--requests", type=int, default=300, help="requests per round for the c=1 figures (TTFT, CPU)")
    parser.add_argument("--ttft-block", type=int, default=30,
                        help="TTFT requests to one target before the next takes its turn (--requests is rounded to whole turns)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run (c=16, c=64)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (Duet, relay, direct); medians are printed")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.ttft_block < 1 or args.requests < 1:
        parser.error("--ttft-block and --requests must be at least 1")

    run = begin("bench")
    load_before = run.load_before
    tokens = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens)]
    with served(tokens, relay=True) as services:
        servers = {"duet": (services.duet.pid, f"{services.base_url}/v1/chat/completions"),
                   "relay": (services.relay.pid, f"{services.relay_url}/v1/chat/completions")}  # type: ignore[union-attr]
        results = asyncio.run(measure(args, servers, f"{services.upstream_base}/chat/completions"))
    load_after = os.getloadavg()
    save(run, results, args)
    if args.json:
        print(json.dumps({**results, "load_average": {"before": load_before, "after": load_after}}, indent=2))
        return
    print(f"streamed two-stage request, {args.tokens} reasoning + {args.tokens} answer tokens; {os.cpu_count()} cores; "
          f"medians of {args.rounds} interleaved rounds ({args.requests} requests at c=1, TTFT in turns of {args.ttft_block}; "
          f"{args.seconds:g} s at c=16 and c=64)")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(table(results))
    print("TTFT overhead, Duet / relay, by round: " + ", ".join(f"{r:.2f}×" for r in results["ttft_overhead_ratio_by_round"].values()))


if __name__ == "__main__":
    main()
