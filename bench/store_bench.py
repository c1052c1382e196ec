"""What one continuation-store call costs as the number of stored rounds grows.

For each store (SQLite, memory, and Redis when ``redis-server`` is installed) and each size, fills
the store with that many live rounds, then times ``put`` (one new round, one call id: what a mixed
tool round saves) and ``get`` (one stored round: what its follow-up reads), each call awaited on
the event loop as Duet awaits it. Prints milliseconds per call: mean, median and the slowest.

With ``--http``, measures what that does to the service: ``duet serve`` (SQLite store, filled with
that many live rounds) in front of a scripted upstream whose answer model makes a mixed round (a
service tool and a client tool) on every request, driven at a given concurrency; prints requests/s,
the median and slowest latency, the share answered 200, and the warnings and tracebacks Duet logged.
``--state redis-down`` / ``redis-hung`` do the same against a Redis that refuses connections or never
answers, each round followed by its follow-up (which reads the store).

Run from the repository root: ``python bench/store_bench.py`` (``--help`` for options). It uses only
the stores' constructors and ``put``/``get``, so it also measures an older checkout: run it with that
checkout first on ``PYTHONPATH`` (the path of the module it measures is printed first). The figures
go to ``bench/results/store_bench-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp
import yaml

from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage

from duet.agents import continuations
from duet.agents.continuations import Continuation, MemoryContinuationStore, RedisContinuationStore, SQLiteContinuationStore
from record import begin, save  # this script's folder

TTL = 24 * 3600.0
ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests.scripted_upstream; last, so a checkout on PYTHONPATH is the one measured
NOTIFY = {"type": "function", "function": {"name": "notify_user", "description": "Shows a notification.",
                                           "parameters": {"type": "object", "properties": {"message": {"type": "string"}}}}}


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
        connection.execute(
            "CREATE TABLE IF NOT EXISTS continuations (call_id TEXT PRIMARY KEY, payload TEXT NOT NULL, expires_at REAL NOT NULL)"
        )
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


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def run(sizes: list[int], count: int, kinds: list[str]) -> list[dict[str, Any]]:
    """Prints and returns the milliseconds per call of each store and size."""
    figures: list[dict[str, Any]] = []
    payload = a_round().model_dump_json()
    print(f"module: {continuations.__file__}")
    print(f"{'store':8} {'rows':>8}   {'put mean':>9} {'p50':>7} {'max':>7}   {'get mean':>9} {'p50':>7} {'max':>7}   (ms)")

    def report(kind: str, rows: int, puts: list[float], gets: list[float]) -> None:
        figures.append({"store": kind, "rows": rows,
                        **{f"{name}_ms": {"mean": statistics.fmean(costs), "p50": statistics.median(costs), "max": max(costs)}
                           for name, costs in (("put", puts), ("get", gets))}})
        print(f"{kind:8} {rows:>8}   {statistics.fmean(puts):9.3f} {statistics.median(puts):7.3f} {max(puts):7.2f}"
              f"   {statistics.fmean(gets):9.3f} {statistics.median(gets):7.3f} {max(gets):7.2f}", flush=True)

    redis_process = None
    redis_url = ""
    if "redis" in kinds and (binary := shutil.which("redis-server")):
        port = free_port()
        redis_process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                         stdout=subprocess.DEVNULL)
        redis_url = f"redis://127.0.0.1:{port}/0"
        time.sleep(0.5)  # noqa: ASYNC251 - before any store is measured: nothing else runs yet
    elif "redis" in kinds:
        print("redis: no redis-server on PATH, skipped")
    try:
        for rows in sizes:
            if "sqlite" in kinds:
                with tempfile.TemporaryDirectory() as directory:
                    path = Path(directory) / "state.db"
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
    return figures


def serve_mixed_rounds(port: int) -> None:
    """The scripted upstream, answering every first request with a mixed round (``--serve-upstream``)."""
    from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

    def respond(body: dict[str, Any]) -> Reply:
        if "r1" in body.get("model", ""):
            return Reply(reasoning=[f"thought{i} " for i in range(20)])
        if body["messages"][-1]["role"] == "tool":
            return Reply(content=["Done."])
        return Reply(tool_calls=[ScriptedCall("lookup_customer", '{"email": "ada@example.com"}'),
                                 ScriptedCall("notify_user", '{"message": "found"}')])

    ScriptedUpstream("127.0.0.1", port, respond).start()
    while True:
        time.sleep(3600)


async def mixed_rounds_per_second(url: str, concurrency: int, seconds: float, follow_ups: bool) -> dict[str, Any]:
    """Mixed rounds (and, with ``follow_ups``, each round's follow-up, which reads the stored part)
    from ``concurrency`` clients for ``seconds``."""
    latencies: list[float] = []
    statuses: list[int] = []
    question = [{"role": "user", "content": "Who is ada@example.com?"}]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def one(messages: list[dict[str, Any]]) -> dict[str, Any]:
            start = time.perf_counter()
            async with session.post(url, json={"model": "duet", "messages": messages, "tools": [NOTIFY]}) as response:
                answer = await response.json()
            latencies.append(time.perf_counter() - start)
            statuses.append(response.status)
            return answer  # type: ignore[no-any-return]

        async def pair() -> None:
            first = await one(question)
            if follow_ups and "choices" in first:
                message = first["choices"][0]["message"]
                await one([*question, {"role": "assistant", "content": None, "tool_calls": message["tool_calls"]},
                           {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "shown"}])

        for _ in range(10):
            await pair()  # warm up
        latencies.clear()
        statuses.clear()
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            while time.perf_counter() < deadline:
                await pair()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {"rps": len(latencies) / elapsed, "p50": statistics.median(latencies) * 1000, "max": max(latencies) * 1000,
            "ok": statuses.count(200) / len(statuses) * 100}


def hung_server() -> int:
    """A loopback TCP server that accepts connections and never answers (a hung Redis)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    return listener.getsockname()[1]  # type: ignore[no-any-return]


def http_bench(sizes: list[int], concurrency: int, seconds: float, state: str) -> list[dict[str, Any]]:
    """Prints and returns each run's requests/s, latencies, share of 200s and log counts."""
    import duet.agents.continuations as measured

    runs: list[dict[str, Any]] = []

    print(f"module: {measured.__file__}")
    checkout = Path(measured.__file__).resolve().parents[2]  # duet serve runs the code measured
    follow_ups = state != "sqlite"
    print(f"mixed rounds{' and their follow-ups' if follow_ups else ''} through duet serve, state: {state}, "
          f"c={concurrency}, {seconds:g} s each")
    upstream_port, duet_port = free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(upstream_port)], cwd=ROOT)
    try:
        for rows in sizes if state == "sqlite" else [0]:
            with tempfile.TemporaryDirectory() as directory:
                path = Path(directory) / "state.db"
                if state == "sqlite":
                    fill_sqlite(path, rows, a_round().model_dump_json())
                    state_url = f"sqlite:///{path}"
                else:
                    state_url = f"redis://127.0.0.1:{hung_server() if state == 'redis-hung' else free_port()}/0"
                config = Path(directory) / "duet.yaml"
                base = f"http://127.0.0.1:{upstream_port}/v1"
                config.write_text(yaml.safe_dump({"pipelines": [{
                    "name": "duet", "reasoner": {"base_url": base, "model": "bench-r1"}, "answer": {"base_url": base, "model": "bench-answer"},
                    "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}}]}))
                env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
                env |= {"DUET_CONFIG": str(config), "DUET_PORT": str(duet_port), "DUET_STATE_URL": state_url, "DUET_LOG_LEVEL": "warning"}
                log = Path(directory) / "duet.log"
                with log.open("w") as log_file:
                    duet = subprocess.Popen([sys.executable, "-m", "duet.api", "serve"], cwd=checkout, env=env,
                                            stdout=log_file, stderr=subprocess.STDOUT)
                try:
                    deadline = time.monotonic() + 60
                    while not port_open(duet_port):
                        assert time.monotonic() < deadline and duet.poll() is None, "duet did not start"
                        time.sleep(0.1)
                    figures = asyncio.run(mixed_rounds_per_second(f"http://127.0.0.1:{duet_port}/v1/chat/completions",
                                                                  concurrency, seconds, follow_ups))
                finally:
                    duet.terminate()
                    duet.wait(30)
                text = log.read_text()
                label = f"rows {rows:>8}" if state == "sqlite" else state
                runs.append({"state": state, "rows": rows if state == "sqlite" else None, **figures,
                             "warnings": text.count(" WARNING "), "tracebacks": text.count("Traceback")})
                print(f"{label}: {figures['rps']:6.1f} requests/s, p50 {figures['p50']:6.0f} ms, max {figures['max']:6.0f} ms, "
                      f"HTTP 200 {figures['ok']:5.1f}%; log: {text.count(' WARNING ')} warnings, {text.count('Traceback')} tracebacks",
                      flush=True)
    finally:
        upstream.terminate()
        upstream.wait(10)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000,100000,400000", help="comma-separated numbers of stored rounds")
    parser.add_argument("--calls", type=int, default=200, help="puts and gets timed at each size")
    parser.add_argument("--stores", default="sqlite,memory,redis", help="comma-separated: sqlite, memory, redis")
    parser.add_argument("--http", action="store_true", help="requests/s of mixed rounds through duet serve, instead")
    parser.add_argument("--concurrency", type=int, default=32, help="with --http: requests at once")
    parser.add_argument("--seconds", type=float, default=10.0, help="with --http: duration of each run")
    parser.add_argument("--state", choices=["sqlite", "redis-down", "redis-hung"], default="sqlite",
                        help="with --http: a filled SQLite file, or a Redis that refuses connections or never answers "
                             "(then every round is followed up)")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    if args.serve_upstream:
        serve_mixed_rounds(args.serve_upstream)
        return
    started = begin("store_bench")
    if args.http:
        figures = http_bench(sizes, args.concurrency, args.seconds, args.state)
    else:
        figures = asyncio.run(run(sizes, args.calls, args.stores.split(",")))
    save(started, {"module": continuations.__file__, "runs": figures}, args)


if __name__ == "__main__":
    sys.exit(main())
