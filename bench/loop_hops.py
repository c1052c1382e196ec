"""Event-loop passes on a request's path to its first token, Duet against the minimal relay: a count a busy machine does not move.

With hundreds of streams open, each pass of a server's event loop runs thousands of ready callbacks
a second, so a new request's time to first token is about the passes its path crosses times a pass's
length, plus its own CPU: every task started, every future another task resolves, every queue
hand-off and ``call_soon`` on the path waits for the next pass. This script serves each (``duet
serve`` and ``bench/relay.py``) on a counting event loop (asyncio's selector loop, the only loop of
a launcher process: uvloop is hidden from it, so both servers run on the same counted loop), and for
``--requests`` streamed requests at c=1 finds in the loop's record of socket reads and writes:

- **to the upstream**: passes from the pass that read the request's last bytes to the pass that
  wrote its first model request (the reasoner's) to the upstream;
- **token to client**: passes from the pass that read the model's first token to the pass that wrote
  it (the first ``reasoning_content`` or content chunk) to the client;
- **in all**: passes from the request's arrival to its first token written (includes the passes
  spent waiting for the upstream, a process of its own: one per read when nothing else runs);

and for each segment the ready callbacks run in it (on a quiet server, all the request's own).
Medians over the requests are printed; ``--shape`` as ``bench/bench.py``'s.

``python bench/loop_hops.py`` (``--help``; ``DUET_BENCH_CHECKOUT=<folder>`` measures another checkout's
Duet, as ``bench/checkout_duet.py`` says); figures in ``bench/results/loop_hops-<time>.json`` (``--out``
elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import SHAPES
from harness import ANSWER, REASONER, ROOT, client_session, free_port, median, request_options, served, stop, stream_once, wait_up
from record import begin, save

COUNTED = '''
import asyncio, asyncio.selector_events, collections, json, os, runpy, signal, sys, time
sys.modules["uvloop"] = None  # both servers on the counted selector loop (uvicorn's "auto" falls back to it)
UPSTREAM_PORT = int(os.environ["BENCH_UPSTREAM_PORT"])
TRACE = os.environ.get("BENCH_HOPS_TRACE") == "1"  # also note each callback run (what a pass ran), for reading
events, recording = [], False
class CountingReady(collections.deque):
    """The loop's ready queue: counts the callbacks run (each is popped once)."""
    popped = 0
    def popleft(self):
        CountingReady.popped += 1
        handle = super().popleft()
        if recording and TRACE:
            events.append((CountingLoop.passes, CountingReady.popped, time.perf_counter(), "run", "", what_runs(handle).encode(), False))
        return handle
def what_runs(handle):
    """The callback's name; for a task's step, where its coroutine stands (no repr: it could run code)."""
    callback = handle._callback
    name = getattr(callback, "__qualname__", type(callback).__name__)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro, where = owner.get_coro(), []
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                where.append(f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno}:{frame.f_code.co_name}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
        name += " " + owner.get_name() + " " + " > ".join(where)
    elif owner is not None:
        name = type(owner).__module__ + "." + name
    return name
class CountingLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, counting its passes; its socket transports note reads and writes with the pass."""
    passes = 0
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ready = CountingReady()
    def _run_once(self):
        CountingLoop.passes += 1
        super()._run_once()
    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        try:
            peer = sock.getpeername()[1]
        except OSError:
            peer = 0
        role = "edge" if server is not None else "upstream" if peer == UPSTREAM_PORT else ""
        if role:
            note_reads(protocol, role)
        transport = super()._make_socket_transport(sock, protocol, waiter, extra=extra, server=server)
        if role:
            note_writes(transport, role)
        return transport
def note(kind, role, data):
    if recording and data:  # aiohttp's server calls its own data_received(b"") to parse what it holds: no read
        events.append((CountingLoop.passes, CountingReady.popped, time.perf_counter(), kind, role, bytes(data[:64]),
                       b'"reasoning_content"' in data or b'"content":"' in data.replace(b'"content":""', b"")))
noting = {}
def note_reads(protocol, role):
    """The protocol's class swapped for a subclass that notes each read (same layout: a slotted class takes it too)."""
    base = type(protocol)
    if (base, role) not in noting:
        if hasattr(base, "get_buffer"):
            buffers = {}
            def get_buffer(self, size):
                buffers[id(self)] = base.get_buffer(self, size)
                return buffers[id(self)]
            def buffer_updated(self, n):
                note("read", role, bytes(memoryview(buffers.pop(id(self)))[:n]))
                return base.buffer_updated(self, n)
            methods = {"get_buffer": get_buffer, "buffer_updated": buffer_updated}
        else:
            def data_received(self, data):
                note("read", role, data)
                return base.data_received(self, data)
            methods = {"data_received": data_received}
        noting[base, role] = type(base.__name__, (base,), {"__slots__": (), **methods})
    protocol.__class__ = noting[base, role]
def note_writes(transport, role):
    write, writelines = transport.write, transport.writelines
    def counted_write(data):
        note("write", role, data)
        return write(data)
    def counted_writelines(lines):
        lines = list(lines)
        note("write", role, b"".join(lines))
        return writelines(lines)
    transport.write, transport.writelines = counted_write, counted_writelines
def start(*_):
    global recording
    recording = True
def dump(*_):
    global recording
    recording = False
    with open(os.environ["BENCH_HOPS_OUT"] + ".part", "w") as out:
        json.dump([[p, r, t, k, role, d.decode("latin-1"), tok] for p, r, t, k, role, d, tok in events], out)
    os.replace(os.environ["BENCH_HOPS_OUT"] + ".part", os.environ["BENCH_HOPS_OUT"])
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, dump)
asyncio.SelectorEventLoop = CountingLoop  # what uvicorn's asyncio loop factory and asyncio's default policy make
class CountingPolicy(asyncio.DefaultEventLoopPolicy):
    _loop_factory = CountingLoop
asyncio.set_event_loop_policy(CountingPolicy())
script, sys.argv = sys.argv[1], sys.argv[1:]
if script == "duet":
    from duet.api import main
    sys.exit(main())
runpy.run_path(script, run_name="__main__")
'''
"""A launcher: runs ``duet`` or a script on a counting selector loop; the two signals start its record and write it out."""

SEGMENTS = ("to_upstream", "token_to_client", "in_all")


async def requests(url: str, count: int, shape: str) -> None:
    async with client_session() as session:
        for _ in range(count):
            await stream_once(session, f"{url}/v1/chat/completions", SHAPES[shape])


def recorded_run(pid: int, url: str, args: argparse.Namespace, out: Path) -> list[list[Any]]:
    asyncio.run(requests(url, args.warmup, args.shape))
    os.kill(pid, signal.SIGUSR1)
    asyncio.run(requests(url, args.requests, args.shape))
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not out.exists():  # written (then renamed into place) by the signal handler, in its own time
        if time.monotonic() > deadline:
            raise RuntimeError(f"no record written to {out}")
        time.sleep(0.1)
    return json.loads(out.read_text())


def segments(events: list[list[Any]]) -> list[dict[str, tuple[int, int, float]]]:
    """Each request's segments: (passes, callbacks run, seconds). A request starts at the client's
    ``POST`` (its segment's pass is that of the last read of the client before the model request)."""
    found = []
    index = 0
    while True:
        starts = [i for i in range(index, len(events)) if events[i][3] == "read" and events[i][4] == "edge"
                  and events[i][5].startswith("POST ")]
        if not starts:
            return found
        at = starts[0]
        asked = next((i for i in range(at, len(events)) if events[i][3] == "write" and events[i][4] == "upstream"), None)
        if asked is None:
            return found
        arrived = max(i for i in range(at, asked) if events[i][3] == "read" and events[i][4] == "edge")
        token_in = next(i for i in range(asked, len(events)) if events[i][3] == "read" and events[i][4] == "upstream" and events[i][6])
        token_out = next(i for i in range(token_in, len(events)) if events[i][3] == "write" and events[i][4] == "edge" and events[i][6])

        def span(a: int, b: int) -> tuple[int, int, float]:
            return events[b][0] - events[a][0], events[b][1] - events[a][1], events[b][2] - events[a][2]

        found.append({"to_upstream": span(arrived, asked), "token_to_client": span(token_in, token_out), "in_all": span(arrived, token_out)})
        index = token_out + 1


def summary(found: list[dict[str, tuple[int, int, float]]]) -> dict[str, Any]:
    return {name: {"passes": median([f[name][0] for f in found]), "callbacks": median([f[name][1] for f in found]),
                   "ms": 1000 * median([f[name][2] for f in found]), "passes_min": min(f[name][0] for f in found),
                   "passes_max": max(f[name][0] for f in found)} for name in SEGMENTS} | {"requests": len(found)}


def measure(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Both servers' segments."""
    launcher = folder / "counted.py"
    launcher.write_text(COUNTED)
    upstream = ["--reasoning-tokens", str(args.tokens), "--answer-tokens", str(args.tokens), "--delay-between", str(args.pace_ms / 1000)]
    checkout = os.environ.get("DUET_BENCH_CHECKOUT")  # another checkout's Duet (the "before" of an A/B: checkout_duet.py)
    duet = [str(ROOT / "bench" / "checkout_duet.py"), checkout] if checkout else ["duet"]
    figures: dict[str, Any] = {}
    upstream_port = free_port()
    os.environ["BENCH_UPSTREAM_PORT"] = str(upstream_port)
    os.environ["BENCH_HOPS_OUT"] = str(folder / "duet.json")
    with served(upstream, command=[sys.executable, str(launcher), *duet], upstream_port=upstream_port) as services:
        figures["duet"] = summary(segments(recorded_run(services.duet.pid, services.base_url, args, folder / "duet.json")))
        port = free_port()
        os.environ["BENCH_HOPS_OUT"] = str(folder / "relay.json")
        relay = subprocess.Popen([sys.executable, str(launcher), str(ROOT / "bench" / "relay.py"), "--port", str(port), "--upstream",
                                  services.upstream_base, "--reasoner", REASONER, "--answer", ANSWER], cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            wait_up(f"http://127.0.0.1:{port}/health", process=relay)
            figures["relay"] = summary(segments(recorded_run(relay.pid, f"http://127.0.0.1:{port}", args, folder / "relay.json")))
        finally:
            stop(relay)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    request_options(parser, SHAPES, tokens=2, requests=20, warmup=10, tokens_help="tokens per stage")
    parser.add_argument("--keep", type=Path, help="a folder to keep the servers' raw records in (duet.json, relay.json)")
    parser.add_argument("--trace", action="store_true", help="also record each callback run (for reading, with --keep)")
    parser.add_argument("--out", type=Path, help="the results file (default bench/results/loop_hops-<time>.json)")
    args = parser.parse_args()
    run = begin("loop_hops")
    os.environ["BENCH_HOPS_TRACE"] = "1" if args.trace else ""
    with tempfile.TemporaryDirectory() as folder:
        figures = measure(args, Path(folder))
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for name in ("duet.json", "relay.json"):
                (args.keep / name).write_bytes((Path(folder) / name).read_bytes())
    save(run, figures, vars(args), args.label, out=args.out)
    print(f"{args.shape}, {args.requests} requests at c=1 on a counting selector loop (medians; passes min–max)")
    print("| segment | Duet passes | relay passes | Duet callbacks | relay callbacks | Duet ms | relay ms |\n|---|---|---|---|---|---|---|")
    for name in SEGMENTS:
        duet, relay = figures["duet"][name], figures["relay"][name]
        print(f"| {name} | {duet['passes']:g} ({duet['passes_min']}–{duet['passes_max']}) | {relay['passes']:g} "
              f"({relay['passes_min']}–{relay['passes_max']}) | {duet['callbacks']:g} | {relay['callbacks']:g} | "
              f"{duet['ms']:.2f} | {relay['ms']:.2f} |")


if __name__ == "__main__":
    main()
