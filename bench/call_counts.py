"""Python calls per request, Duet against the minimal relay: a figure a busy machine does not move.

CPU time per request moves by ±10 % from one run to the next on a shared 2-core machine (the other
processes' load, caches, the clock); the number of Python function calls a request makes does not.
This script serves each (``duet serve`` and ``bench/relay.py``) under :mod:`cProfile`, switched on
(``SIGUSR1``) after a warm-up and written out (``SIGUSR2``) after ``--requests`` streamed requests at
c=1, for two sizes of the same request (``--tokens`` and 1 token per stage), and reports:

- calls per request, and cProfile's own time per request (inflated by the profiler, which costs
  per call: a ratio, not a time);
- **fixed** calls per request (the 1-token request: what a request costs before and after its tokens)
  and calls **per token** (the difference, over the difference in tokens);
- for Duet, the fixed calls by package (``--top`` rows): where a request's fixed cost goes;
- calls per request in a **burst** of ``--burst`` 1 + 1-token requests at once after that run: what each
  request costs when it arrives with others, above what the worker holds (Duet: a new team and its
  first run; both: a new upstream connection). What arrivals onto open streams pay.

``python bench/call_counts.py`` (``--help``; ``DUET_BENCH_CHECKOUT=<folder>`` measures another checkout's
Duet, as ``bench/checkout_duet.py`` says); figures in ``bench/results/call_counts-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Coroutine

from bench import SHAPES
from harness import REASONER, ANSWER, ROOT, client_session, free_port, request_options, served, stop, stream_once, wait_up
from record import begin, save

PROFILED = '''
import cProfile, os, runpy, signal, sys
profile = cProfile.Profile()
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
def write(*_):
    profile.disable()
    profile.dump_stats(os.environ["BENCH_PROFILE_OUT"])
signal.signal(signal.SIGUSR2, write)
script, sys.argv = sys.argv[1], sys.argv[1:]
if script == "duet":
    from duet.api import main
    sys.exit(main())
runpy.run_path(script, run_name="__main__")
'''
"""A launcher: runs ``duet`` or a script with a profiler the two signals switch on and write out."""


async def requests(url: str, count: int, shape: str) -> None:
    async with client_session() as session:
        for _ in range(count):
            await stream_once(session, f"{url}/v1/chat/completions", SHAPES[shape])


async def burst(url: str, count: int, shape: str) -> None:
    """``count`` requests at once, each on a connection of its own (a worker's arrivals)."""
    async with client_session() as session:
        await asyncio.gather(*(stream_once(session, f"{url}/v1/chat/completions", SHAPES[shape]) for _ in range(count)))


def profiled(pid: int, out: Path, load: Coroutine[Any, Any, None]) -> pstats.Stats:
    """The server's profile of ``load`` (added to what it profiled before: it writes its whole profile)."""
    written = out.stat().st_mtime_ns if out.exists() else 0
    os.kill(pid, signal.SIGUSR1)
    asyncio.run(load)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not out.exists() or out.stat().st_size == 0 or out.stat().st_mtime_ns == written:  # written by the signal handler
        if time.monotonic() > deadline:
            raise RuntimeError(f"no profile written to {out}")
        time.sleep(0.1)
    time.sleep(0.5)  # the file is written whole before the process reads on
    return pstats.Stats(str(out))


def profiled_run(pid: int, url: str, args: argparse.Namespace, out: Path) -> pstats.Stats:
    asyncio.run(requests(url, args.warmup, args.shape))
    return profiled(pid, out, requests(url, args.requests, args.shape))


def burst_run(pid: int, url: str, args: argparse.Namespace, out: Path, before: dict[str, Any]) -> dict[str, Any]:
    """The summary of a burst of ``--burst`` requests after the run at c=1: what each of them added."""
    after = summary(profiled(pid, out, burst(url, args.burst, args.shape)), 1)
    calls = (after["calls"] - before["calls"] * args.requests) / args.burst
    by_package = {name: (n - before["by_package"].get(name, 0) * args.requests) / args.burst for name, n in after["by_package"].items()}
    return {"calls": calls, "by_package": dict(sorted(by_package.items(), key=lambda item: -item[1]))}


def package_of(file: str) -> str:
    if "site-packages/" in file:
        return file.split("site-packages/")[1].split("/")[0]
    if file.startswith(str(ROOT)):
        return "duet:" + "/".join(Path(file).relative_to(ROOT).parts[:2])
    return "builtins" if file == "~" else "stdlib"


def summary(stats: pstats.Stats, count: int) -> dict[str, Any]:
    calls = collections.Counter[str]()
    seconds = 0.0
    for (file, _, _), (_, ncalls, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        calls[package_of(file)] += ncalls
        seconds += own
    return {"calls": sum(calls.values()) / count, "profiled_ms": 1000 * seconds / count,
            "by_package": {name: n / count for name, n in calls.most_common()}}


def measure(args: argparse.Namespace, tokens: int, folder: Path) -> dict[str, Any]:
    """Both servers' summaries for requests of ``tokens`` tokens per stage; with ``args.burst``, a burst's
    besides (``<server>_burst``)."""
    env = {"PYTHONPATH": str(ROOT)}
    launcher = folder / "profiled.py"
    launcher.write_text(PROFILED)
    upstream = ["--reasoning-tokens", str(tokens), "--answer-tokens", str(tokens), "--delay-between", str(args.pace_ms / 1000)]
    figures: dict[str, Any] = {}
    os.environ["BENCH_PROFILE_OUT"] = str(folder / f"duet-{tokens}.prof")
    checkout = os.environ.get("DUET_BENCH_CHECKOUT")  # another checkout's Duet (the "before" of an A/B: checkout_duet.py)
    duet = [str(ROOT / "bench" / "checkout_duet.py"), checkout] if checkout else ["duet"]
    with served(upstream, command=[sys.executable, str(launcher), *duet]) as services:
        out = folder / f"duet-{tokens}.prof"
        figures["duet"] = summary(profiled_run(services.duet.pid, services.base_url, args, out), args.requests)
        if args.burst:
            figures["duet_burst"] = burst_run(services.duet.pid, services.base_url, args, out, figures["duet"])
        port = free_port()
        os.environ["BENCH_PROFILE_OUT"] = str(folder / f"relay-{tokens}.prof")
        relay = subprocess.Popen([sys.executable, str(launcher), str(ROOT / "bench" / "relay.py"), "--port", str(port), "--upstream",
                                  services.upstream_base, "--reasoner", REASONER, "--answer", ANSWER], cwd=ROOT, env={**os.environ, **env})
        try:
            wait_up(f"http://127.0.0.1:{port}/health", process=relay)
            out = folder / f"relay-{tokens}.prof"
            figures["relay"] = summary(profiled_run(relay.pid, f"http://127.0.0.1:{port}", args, out), args.requests)
            if args.burst:
                figures["relay_burst"] = burst_run(relay.pid, f"http://127.0.0.1:{port}", args, out, figures["relay"])
        finally:
            stop(relay)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    request_options(parser, SHAPES, tokens=40, requests=50, warmup=30, tokens_help="tokens per stage of the full request")
    parser.add_argument("--top", type=int, default=12, help="packages listed for Duet's fixed calls")
    parser.add_argument("--burst", type=int, default=20,
                        help="after the 1 + 1-token run, this many such requests at once (new teams, new connections); 0: none")
    args = parser.parse_args()
    run = begin("call_counts")
    with tempfile.TemporaryDirectory() as folder:
        full = measure(argparse.Namespace(**{**vars(args), "burst": 0}), args.tokens, Path(folder))
        fixed = measure(args, 1, Path(folder))
    figures: dict[str, Any] = {"full": full, "fixed": fixed}
    for server in ("duet", "relay"):
        figures[server] = {"calls_per_request": full[server]["calls"], "fixed_calls_per_request": fixed[server]["calls"],
                           "calls_per_token": (full[server]["calls"] - fixed[server]["calls"]) / (2 * (args.tokens - 1)),
                           "profiled_ms_per_request": full[server]["profiled_ms"]}
        if args.burst:
            figures[server]["burst_calls_per_request"] = fixed[f"{server}_burst"]["calls"]
    save(run, figures, vars(args), args.label)
    print(f"{args.shape}, {args.tokens} + {args.tokens} tokens, {args.requests} requests at c=1 under cProfile")
    print("| | Duet | minimal relay | Duet / relay |\n|---|---|---|---|")
    for key, name in (("calls_per_request", "Python calls per request"), ("fixed_calls_per_request", "fixed calls per request (1 + 1 tokens)"),
                      ("calls_per_token", "calls per token"), ("profiled_ms_per_request", "profiled ms per request"),
                      *((("burst_calls_per_request", f"calls per request in a burst of {args.burst} (1 + 1 tokens)"),) if args.burst else ())):
        duet, relay = figures["duet"][key], figures["relay"][key]
        print(f"| {name} | {duet:.1f} | {relay:.1f} | {duet / relay:.2f}× |")
    print("Duet's fixed calls per request by package: " + ", ".join(
        f"{name} {n:.0f}" for name, n in list(fixed["duet"]["by_package"].items())[:args.top]))
    if args.burst:
        print("Duet's calls per request in the burst by package: " + ", ".join(
            f"{name} {n:.0f}" for name, n in list(fixed["duet_burst"]["by_package"].items())[:args.top]))


if __name__ == "__main__":
    main()
