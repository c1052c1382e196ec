"""What one continuation-store call costs as the number of stored rounds grows.

For each store (SQLite, memory, and Redis when ``redis-server`` is installed) and each size, fills
the store with that many live rounds, then times ``put`` (one new round, one call id: what a mixed
tool round saves) and ``get`` (one stored round: what its follow-up reads), each call awaited on
the event loop as Duet awaits it. Prints milliseconds per call: mean, median and the slowest.

Run from the repository root: ``python bench/store_bench.py`` (``--help`` for options). It uses only
the stores' constructors and ``put``/``get``, so it also measures an older checkout: run it with that
checkout first on ``PYTHONPATH`` (the path of the module it measures is printed first).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Awaitable, Callable

from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage

from agents import continuations
from agents.continuations import Continuation, MemoryContinuationStore, RedisContinuationStore, SQLiteContinuationStore

TTL = 24 * 3600.0


def a_round() -> Continuation:
    """A mixed round as Duet stores it: a service call and a client call, the service result, the reasoning."""
    calls = [FunctionCall(id="call_service_0000000000000000", name="lookup_customer", arguments='{"email": "ada@example.com"}'),
             FunctionCall(id="call_client_00000000000000000", name="notify_user", arguments='{"message": "found"}')]
    result = FunctionExecutionResult(call_id=calls[0].id, name="lookup_customer", is_error=False,
                                     content='{"name": "Ada", "plan": "pro", "since": "2019-04-01", "open_tickets": 2}')
    return Continuation(turn=[AssistantMessage(content=calls, source="answerer"), FunctionExecutionResultMessage(content=[result])],
                        reasoning="Look the customer up first, then tell the user what was found. " * 4)


async def timed(call: Callable[[int], Awaitable[object]], count: int) -> list[float]:
    costs = []
    for index in range(count):
        start = time.perf_counter()
        await call(index)
        costs.append((time.perf_counter() - start) * 1000)
    return costs


def fill_sqlite(path: Path, rows: int, payload: str) -> None:
    """Rows written straight into the store's table (putting them one by one would take hours on a slow store)."""
    connection = sqlite3.connect(path)
    expires = time.time() + TTL
    with connection:
        connection.executemany("INSERT INTO continuations VALUES (?, ?, ?)", ((f"bench:fill-{i}", payload, expires) for i in range(rows)))
    connection.close()


async def measure(store: continuations.ContinuationStore, count: int, tag: str) -> tuple[list[float], list[float]]:
    continuation = a_round()
    puts = await timed(lambda i: store.put([f"bench:{tag}-{i}"], continuation), count)
    gets = await timed(lambda i: store.get([f"bench:{tag}-{i}"]), count)
    return puts, gets


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def run(sizes: list[int], count: int, kinds: list[str]) -> None:
    payload = a_round().model_dump_json()
    print(f"module: {continuations.__file__}")
    print(f"{'store':8} {'rows':>8}   {'put mean':>9} {'p50':>7} {'max':>7}   {'get mean':>9} {'p50':>7} {'max':>7}   (ms)")

    def report(kind: str, rows: int, puts: list[float], gets: list[float]) -> None:
        print(f"{kind:8} {rows:>8}   {statistics.fmean(puts):9.3f} {statistics.median(puts):7.3f} {max(puts):7.2f}"
              f"   {statistics.fmean(gets):9.3f} {statistics.median(gets):7.3f} {max(gets):7.2f}", flush=True)

    redis_process = None
    redis_url = ""
    if "redis" in kinds and (binary := shutil.which("redis-server")):
        port = free_port()
        redis_process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                         stdout=subprocess.DEVNULL)
        redis_url = f"redis://127.0.0.1:{port}/0"
        time.sleep(0.5)
    elif "redis" in kinds:
        print("redis: no redis-server on PATH, skipped")
    try:
        for rows in sizes:
            if "sqlite" in kinds:
                with tempfile.TemporaryDirectory() as directory:
                    path = Path(directory) / "state.db"
                    SQLiteContinuationStore(path, TTL)  # creates the table
                    fill_sqlite(path, rows, payload)
                    store = SQLiteContinuationStore(path, TTL)
                    await asyncio.sleep(0.5)  # let any startup work settle
                    report("sqlite", rows, *await measure(store, count, f"s{rows}"))
                    await store.close()
            if "memory" in kinds:
                store = MemoryContinuationStore(TTL)
                continuation = a_round()
                for i in range(rows):  # straight into its table, for the same reason
                    store._entries[f"bench:fill-{i}"] = (math.inf, continuation)  # type: ignore[assignment]
                report("memory", rows, *await measure(store, count, f"m{rows}"))
            if redis_url:
                import redis

                client = redis.Redis.from_url(redis_url)
                client.flushdb()
                for start in range(0, rows, 10_000):
                    pipe = client.pipeline(transaction=False)
                    for i in range(start, min(rows, start + 10_000)):
                        pipe.set(f"duet:continuation:bench:fill-{i}", payload, ex=int(TTL))
                    pipe.execute()
                client.close()
                store = RedisContinuationStore(redis_url, TTL)
                report("redis", rows, *await measure(store, count, f"r{rows}"))
                await store.close()
    finally:
        if redis_process is not None:
            redis_process.terminate()
            redis_process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000,100000,400000", help="comma-separated numbers of stored rounds")
    parser.add_argument("--calls", type=int, default=200, help="puts and gets timed at each size")
    parser.add_argument("--stores", default="sqlite,memory,redis", help="comma-separated: sqlite, memory, redis")
    args = parser.parse_args()
    asyncio.run(run([int(n) for n in args.rows.split(",")], args.calls, args.stores.split(",")))


if __name__ == "__main__":
    sys.exit(main())
