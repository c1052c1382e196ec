"""Duet's resident memory across rounds of client hang-ups (issue 7, item 1).

Starts the scripted upstream (in this process, on its own thread) and ``duet serve`` as a separate
process on loopback, then runs ``--rounds`` rounds of ``--aborts`` hang-ups each, spread over every
point of a request (before the first byte, during the reasoning, during the answer, during a
service tool call, a non-streamed request; see ``tests/aborts.py``). After each round it waits
until no request is in flight and prints Duet's RSS. Memory that grows round after round is a leak.

Run from the repository root: ``python bench/abort_memory.py`` (``--help`` for options). The figures
go to ``bench/results/abort_memory-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests/ (this folder, first on the path, holds bench.py)

from harness import free_port, memory_mb, start_duet, stop, wait_idle  # noqa: E402
from record import begin, save  # noqa: E402
from tests.aborts import abort_many, abort_responder  # noqa: E402
from tests.scripted_upstream import ScriptedUpstream  # noqa: E402

KEY = "bench-key"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--aborts", type=int, default=1000, help="hang-ups per round")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    run = begin("abort_memory")
    rss_mb: list[float] = []  # after each round; the first at the start

    with ScriptedUpstream(responder=abort_responder) as upstream, tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "duet.yaml"
        answer = {"base_url": upstream.base_url, "model": "abort-answer"}
        config.write_text(yaml.safe_dump({
            "ping_interval": 0.5,
            "pipelines": [{"name": "duet", "reasoner": {"base_url": upstream.base_url, "model": "abort-r1"}, "answer": answer,
                           "tools": {"functions": ["tests.aborts:slow_lookup"]}}],
        }))
        port = free_port()
        duet = start_duet(port, {"DUET_CONFIG": str(config), "DUET_API_KEYS": KEY, "DUET_LOG_LEVEL": "error",
                                 "DUET_STATE_URL": f"sqlite:///{directory}/state.db"})
        try:
            print(f"{args.aborts} hang-ups per round over every point, concurrency {args.concurrency}")
            rss_mb.append(round(memory_mb(duet.pid)[0], 1))
            print(f"  round 0 (started)   RSS {rss_mb[-1]:.0f} MB")
            for round_number in range(1, args.rounds + 1):
                started = time.monotonic()
                asyncio.run(abort_many(port, "duet", args.aborts, KEY, args.concurrency))
                if wait_idle(port, KEY) != 0:
                    raise RuntimeError("Duet did not become idle")
                upstream.requests.clear()
                rss_mb.append(round(memory_mb(duet.pid)[0], 1))
                print(f"  round {round_number} ({time.monotonic() - started:.0f} s)      RSS {rss_mb[-1]:.0f} MB", flush=True)
        finally:
            stop(duet)
    save(run, {"rss_mb_after_each_round": rss_mb}, args)

if __name__ == "__main__":
    main()
