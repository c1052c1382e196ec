"""What Duet logs while clients hang up at random moments of their requests.

Starts the scripted upstream (each stage 10 chunks, 20 ms apart) and ``duet serve`` as separate
processes on loopback, sends ``--requests`` requests that are each abandoned at a random moment
(``tests/hang_ups.py``: mid-body, at once, mid-stream, while waiting; streamed and not; FIN or
RST), then counts the lines of Duet's log that would page someone: ERROR lines, "Task exception
was never retrieved" and tracebacks. An ordinary hang-up should produce none.

Run from the repository root: ``python bench/hang_ups.py`` (``--help`` for options). The counts go to
``bench/results/hang_ups-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after this script's folder: tests/

from harness import in_flight, served, wait_idle
from record import begin, save
from tests.hang_ups import hang_ups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="hang-ups (default 1000)")
    parser.add_argument("--at-once", type=int, default=20, help="concurrent clients (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    run = begin("hang_ups")
    upstream_args = ["--reasoning-tokens", "10", "--answer-tokens", "10", "--delay-between", "0.02"]
    with tempfile.TemporaryFile("w+") as log:
        with served(upstream_args, log=log) as services:
            started = time.monotonic()
            asyncio.run(hang_ups(services.port, args.requests, args.at_once, args.seed))
            took = time.monotonic() - started
            wait_idle(services.port, timeout=15)
            left = in_flight(services.port)
            time.sleep(1)  # what the last runs' clean-up logs
        log.seek(0)
        lines = log.read().splitlines()
    errors = [line for line in lines if " ERROR " in line or line.startswith("ERROR:")]  # Duet's format, uvicorn's
    print(f"{args.requests} hang-ups ({args.at_once} at a time) in {took:.1f} s; in flight afterwards: {left}")
    print(f"  ERROR lines                           {len(errors)}")
    print(f"  'Task exception was never retrieved'  {sum('Task exception was never retrieved' in line for line in lines)}")
    print(f"  'task_done() called too many times'   {sum('task_done() called too many times' in line for line in lines)}")
    print(f"  tracebacks                            {sum(line.startswith('Traceback') for line in lines)}")
    kinds: dict[str, int] = {}
    for line in errors:
        kind = (line.split(" ERROR ", 1)[1] if " ERROR " in line else "uvicorn: " + line[6:].strip())[:80]
        kinds[kind] = kinds.get(kind, 0) + 1
    for kind, count in sorted(kinds.items(), key=lambda item: -item[1]):
        print(f"    {count:>5}  {kind}")
    save(run, {"hang_ups": args.requests, "seconds": round(took, 1), "in_flight_afterwards": left, "error_lines": len(errors),
               "task_exception_never_retrieved": sum("Task exception was never retrieved" in line for line in lines),
               "task_done_too_many_times": sum("task_done() called too many times" in line for line in lines),
               "tracebacks": sum(line.startswith("Traceback") for line in lines), "error_kinds": kinds}, args)


if __name__ == "__main__":
    main()
