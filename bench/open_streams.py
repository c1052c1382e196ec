"""Open streams at scale: Duet against the minimal relay with hundreds of streams at a model's pace, in one run.

Starts the scripted upstream (one token per write, ``--pace-ms`` apart: 100 ms, 10 tokens/s by
default, the first token at once), ``duet serve`` and the minimal relay (``bench/relay.py``) on
loopback. For each count of open streams (``--streams``, default 300, 500 and 1,000), Duet and the
relay take turns (who goes first alternates), each through the same phases:

1. **ramp**: N clients open streams at ``--arrival-rate`` per second (250), each streaming two-stage
   requests back to back (reasoning 40 tokens, answer 40), so N streams stay open;
2. **steady** (``--seconds``): own CPU per token delivered (user + system of the server, from /proc,
   over the tokens its clients received), the added inter-token delay (client-side gap between two
   tokens of one stage, minus the pace: p50 and p99), memory per open stream (RSS growth over the
   level before the ramp, divided by N: from the first round only, as a process keeps what it took);
3. **a new request, once open**: ``--probes`` single requests, a few per second, on top of the N
   (burst-shaped, so they end at once): TTFT p50 / p99;
4. **arrivals**: ``--arrivals`` more streams opening at ``--arrival-rate`` on top of the N: their
   TTFT p50 / p99; then a **crowd** of ``--crowd`` requests within 0.4 s: TTFT p50 / p99;
5. every client hangs up; the next phase waits until the server's CPU is quiet.

From the steady window to the crowd the client makes no cyclic collection of its own: one would
show as a gap in every stream at once, on whichever server it fell.

Requests that fail (a non-200, a dropped stream) are counted per phase. Duet runs with
``DUET_MAX_CONCURRENT_REQUESTS`` and ``DUET_MAX_CONNECTIONS`` large enough for the run unless
``--duet-defaults``. Run from the repository root: ``python bench/open_streams.py`` (``--help``); the
figures go to ``bench/results/open_streams-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import aiohttp

from harness import chat_body, cpu_seconds, median, memory_mb, ratio, served
from record import begin, save

STREAM_BODY = chat_body("duet")
PROBE_BODY = chat_body("duet", [{"role": "user", "content": "Plan a picnic for four. [burst]"}])
CROWD_WITHIN = 0.4  # seconds over which the crowd's requests are sent


@dataclass
class Tally:
    """What the clients of one phase saw."""

    window: tuple[float, float] = (0.0, 0.0)  # perf_counter bounds of the steady window
    tokens: int = 0  # delivered inside the window
    gaps: list[float] = field(default_factory=list)  # seconds between two tokens of one stage, inside the window
    first_tokens: int = 0  # streams of the ramp that got their first token
    all_open: asyncio.Event = field(default_factory=asyncio.Event)  # set when ``first_tokens`` reaches ``ramp_size``
    ramp_size: int = 0
    ramp_ttft: list[float] = field(default_factory=list)
    errors: int = 0


REASONING, CONTENT, TOOL_CALL = b'"reasoning_content":"', b'"content":"', b'"tool_calls"'


def tokens_in(data: bytes) -> tuple[int, int]:
    """Reasoning tokens, and answer tokens (text or tool-call chunks), in what one read brought (each
    chunk of these servers carries one; ``"content":""``, the role chunk's, is none)."""
    return data.count(REASONING), data.count(CONTENT) - data.count(b'"content":""') + data.count(TOOL_CALL)


async def stream_tokens(http: aiohttp.ClientSession, url: str, body: dict[str, Any], tally: Tally | None) -> float:
    """One streamed request; its TTFT in seconds. With ``tally``, counts its tokens and gaps in the window.
    Read by read, not line by line: the client is the cheapest of the three processes on the cores."""
    start = time.perf_counter()
    first, last, last_kind = 0.0, 0.0, 0
    async with http.post(url, json=body) as response:
        if response.status != 200:
            await response.read()
            raise RuntimeError(f"HTTP {response.status}")
        async for data in response.content.iter_any():
            reasoning, answer = tokens_in(data)
            if not reasoning and not answer:
                continue
            now = time.perf_counter()
            if not first:
                first = now - start
            kind = 2 if answer else 1
            if tally is not None and tally.window[0] <= now <= tally.window[1]:
                tally.tokens += reasoning + answer
                if kind == last_kind and last >= tally.window[0] and reasoning + answer == 1:
                    tally.gaps.append(now - last)  # a read of one token: the gap since the stage's last one
            last, last_kind = now, kind
    return first


async def keep_open(http: aiohttp.ClientSession, url: str, tally: Tally) -> None:
    """One client of the N: streams requests back to back until cancelled."""
    first = True
    while True:
        try:
            ttft = await stream_tokens(http, url, STREAM_BODY, tally)
        except (TimeoutError, aiohttp.ClientError, RuntimeError):
            tally.errors += 1
            await asyncio.sleep(0.1)  # a refused stream is retried, not hammered
            continue
        if first:
            tally.ramp_ttft.append(ttft)
            tally.first_tokens += 1
            if tally.first_tokens >= tally.ramp_size:
                tally.all_open.set()
            first = False


async def timed_requests(http: aiohttp.ClientSession, url: str, body: dict[str, Any], count: int, within: float,
                         tally: Tally, started: list[asyncio.Task[Any]]) -> list[float]:
    """``count`` requests started evenly over ``within`` seconds, until they end; their TTFTs (of those
    that did not fail). The tasks are added to ``started`` (cancelled with the others if interrupted)."""

    async def one(delay: float) -> float | None:
        await asyncio.sleep(delay)
        try:
            return await stream_tokens(http, url, body, None)
        except (TimeoutError, aiohttp.ClientError, RuntimeError):
            tally.errors += 1
            return None

    tasks = [asyncio.create_task(one(index * within / max(1, count))) for index in range(count)]
    started.extend(tasks)
    return [ttft for ttft in await asyncio.gather(*tasks) if ttft is not None]


def percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "n": 0}
    ordered = sorted(values)
    return {"p50": statistics.median(ordered) * scale, "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * scale,
            "n": len(ordered)}


async def wait_quiet(pid: int, timeout: float = 60.0) -> None:
    """Until the server's CPU stays (almost) still for a second, or ``timeout``."""
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    before = cpu_seconds(pid)
    while time.monotonic() < deadline and time.monotonic() - quiet_since < 1.0:
        await asyncio.sleep(0.25)
        now = cpu_seconds(pid)
        if now - before > 0.02:
            quiet_since = time.monotonic()
        before = now


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection in this client while it measures: one of its own (up to 130 ms with 500
    streams open) would show as a gap in every stream at once and a slow first token, and move the
    inter-token p99 of whichever server it fell on. Collected before, and after."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


async def ramp(http: aiohttp.ClientSession, url: str, count: int, rate: float, tally: Tally) -> list[asyncio.Task[None]]:
    """Opens ``count`` kept-open streams at ``rate`` per second; returns when each has its first token (or 60 s)."""
    clients: list[asyncio.Task[None]] = []
    tally.ramp_size = count
    start = time.perf_counter()
    for index in range(count):
        delay = start + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        clients.append(asyncio.create_task(keep_open(http, url, tally)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(tally.all_open.wait(), 60)
    return clients


async def phase(args: argparse.Namespace, pid: int, url: str, count: int) -> dict[str, Any]:
    """One server with ``count`` open streams: the figures of the module's docstring."""
    await wait_quiet(pid)
    rss_before = memory_mb(pid)[0]
    tally = Tally()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:
        clients = await ramp(http, url, count, args.arrival_rate, tally)
        ramp_errors = tally.errors
        await asyncio.sleep(args.settle)
        extra: list[asyncio.Task[Any]] = []
        with collector_paused():
            tally.window = (time.perf_counter(), time.perf_counter() + args.seconds)
            cpu_before = cpu_seconds(pid)
            await asyncio.sleep(args.seconds)
            cpu = cpu_seconds(pid) - cpu_before
            rss_open = memory_mb(pid)[0]
            once_open = await timed_requests(http, url, PROBE_BODY, args.probes, args.probes / args.probe_rate, tally, extra)
            arrivals = await timed_requests(http, url, STREAM_BODY, args.arrivals, args.arrivals / args.arrival_rate, tally, extra)
            crowd = await timed_requests(http, url, PROBE_BODY, args.crowd, CROWD_WITHIN, tally, extra)
        for task in (*clients, *extra):
            task.cancel()
        await asyncio.gather(*clients, *extra, return_exceptions=True)
    pace = args.pace_ms / 1000
    return {
        "streams": count,
        "streams_open": tally.first_tokens,
        "errors_ramp": ramp_errors,
        "errors": tally.errors,
        "cpu_us_per_token": cpu / max(1, tally.tokens) * 1e6,
        "tokens_per_s": tally.tokens / args.seconds,
        # Below 1, the streams got fewer tokens than the upstream's pace: the machine (client, upstream or server) fell behind.
        "delivered_share": tally.tokens / args.seconds / (count * 1000 / args.pace_ms),
        "cpu_share": cpu / args.seconds,
        "added_delay_ms": percentiles([gap - pace for gap in tally.gaps]),
        "kb_per_stream": (rss_open - rss_before) * 1024 / max(1, count),
        "rss_before_mb": rss_before,
        "rss_open_mb": rss_open,
        "ttft_ramp_ms": percentiles(tally.ramp_ttft[len(tally.ramp_ttft) // 2:]),
        "ttft_once_open_ms": percentiles(once_open),
        "ttft_arrivals_ms": percentiles(arrivals),
        "ttft_crowd_ms": percentiles(crowd),
    }


async def measure(args: argparse.Namespace, servers: dict[str, tuple[int, str]]) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {str(count): {name: [] for name in servers} for count in args.streams}
    turn = 0
    for _ in range(args.rounds):
        for count in args.streams:
            names = list(servers) if turn % 2 == 0 else list(reversed(servers))
            turn += 1
            for name in names:
                pid, url = servers[name]
                figures = await phase(args, pid, url, count)
                print(f"{name} {count} streams: {json.dumps(figures)}", flush=True)
                runs[str(count)][name].append(figures)
    return {count: {name: medians(rounds) for name, rounds in by_name.items()} for count, by_name in runs.items()}


FIRST_ROUND_ONLY = ("kb_per_stream", "rss_before_mb", "rss_open_mb")
"""Figures of the first round alone: a process does not give its memory back when streams close, so a later
round opens its streams in memory it already holds (its RSS growth is about nothing)."""


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the rounds (the percentiles' too); memory, the first round's."""
    merged: dict[str, Any] = {}
    for key, value in rounds[0].items():
        if key in FIRST_ROUND_ONLY:
            merged[key] = value
        elif isinstance(value, dict):
            merged[key] = {inner: median([r[key][inner] for r in rounds]) for inner in value}
        else:
            merged[key] = median([r[key] for r in rounds])
    return merged


ROWS = [  # (label, figure, percentile or "")
    ("streams open", "streams_open", ""),
    ("errors (refused or dropped requests)", "errors", ""),
    ("tokens delivered / the pace's (below 1: behind)", "delivered_share", ""),
    ("own CPU µs per token", "cpu_us_per_token", ""),
    ("added inter-token delay p50, ms", "added_delay_ms", "p50"),
    ("added inter-token delay p99, ms", "added_delay_ms", "p99"),
    ("memory per open stream, KB", "kb_per_stream", ""),
    ("RSS before the streams, MB", "rss_before_mb", ""),
    ("RSS with the streams open, MB", "rss_open_mb", ""),
    ("TTFT of a new request once open, p50 ms", "ttft_once_open_ms", "p50"),
    ("TTFT of a new request once open, p99 ms", "ttft_once_open_ms", "p99"),
    ("TTFT of arrivals at the arrival rate, p50 ms", "ttft_arrivals_ms", "p50"),
    ("TTFT of arrivals at the arrival rate, p99 ms", "ttft_arrivals_ms", "p99"),
    ("TTFT of a crowd within 0.4 s, p50 ms", "ttft_crowd_ms", "p50"),
    ("TTFT of the ramp's second half, p50 ms", "ttft_ramp_ms", "p50"),
]


def table(results: dict[str, Any]) -> str:
    lines = ["| streams | | Duet | minimal relay | Duet / relay |", "|---|---|---|---|---|"]
    for count, by_name in results.items():
        for label, key, inner in ROWS:
            duet, relay = (by_name[name][key][inner] if inner else by_name[name][key] for name in ("duet", "relay"))
            lines.append(f"| {count} | {label} | {duet:.2f} | {relay:.2f} | {ratio(duet, relay):.2f}× |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=lambda text: [int(n) for n in text.split(",")], default=[300, 500, 1000],
                        help="comma-separated counts of open streams (default 300,500,1000)")
    parser.add_argument("--pace-ms", type=float, default=100.0, help="milliseconds between two tokens (default 100: 10 tokens/s)")
    parser.add_argument("--tokens", type=int, default=40, help="tokens per stage (default 40)")
    parser.add_argument("--arrival-rate", type=float, default=250.0, help="streams opened per second (ramp and arrivals)")
    parser.add_argument("--arrivals", type=int, default=250, help="streams arriving on top of the open ones")
    parser.add_argument("--crowd", type=int, default=100, help="requests arriving within 0.4 s on top of the open ones")
    parser.add_argument("--probes", type=int, default=20, help="single new requests once the streams are open")
    parser.add_argument("--probe-rate", type=float, default=5.0, help="probes per second")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between the ramp and the steady window")
    parser.add_argument("--seconds", type=float, default=8.0, help="the steady window")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over the counts (medians are printed)")
    parser.add_argument("--duet-defaults", action="store_true", help="run Duet with its default limits")
    parser.add_argument("--duet-env", action="append", default=[], metavar="DUET_X=value",
                        help="a setting for duet serve (repeatable), e.g. DUET_STATE_URL=memory://")
    parser.add_argument("--label", default="", help="a note saved with the figures (before, after...)")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):  # the client on the servers' loop: its own cost weighs on both alike
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    run = begin("open_streams")
    largest = max(args.streams) + args.arrivals + args.crowd + args.probes + 64
    env = {} if args.duet_defaults else {"DUET_MAX_CONCURRENT_REQUESTS": str(largest), "DUET_MAX_CONNECTIONS": str(2 * largest)}
    env.update(setting.split("=", 1) for setting in args.duet_env)
    upstream = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens), "--delay-between", str(args.pace_ms / 1000)]
    with served(upstream, env=env, relay=True) as services:
        servers = {"duet": (services.duet.pid, f"{services.base_url}/v1/chat/completions"),
                   "relay": (services.relay.pid, f"{services.relay_url}/v1/chat/completions")}  # type: ignore[union-attr]
        results = asyncio.run(measure(args, servers))
    save(run, results, args, label=args.label)
    load = os.getloadavg()
    print(f"{args.tokens} + {args.tokens} tokens per request, {1000 / args.pace_ms:g} tokens/s per stream; arrivals at "
          f"{args.arrival_rate:g}/s; medians of {args.rounds} round(s); load average (1 min) before {run.load_before[0]:.2f}, "
          f"after {load[0]:.2f}")
    print(table(results))


if __name__ == "__main__":
    main()
