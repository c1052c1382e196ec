"""What a client that hangs up still costs (issue 23: late model calls, upstream streams left open,
stalls while streams are cancelled, memory).

Starts the scripted upstream (its own process, answering with ``tests.aborts:abort_responder`` and
writing each model call's arrival and end to a file) and ``duet serve`` (its own process) on
loopback, then runs these parts (``--parts``), each over Chat Completions, Responses and Messages in
turn unless said otherwise:

- ``late``: ``--clients`` clients each send a streamed request and hang up at once, before the first
  byte of the answer (half with FIN, half with RST; ``--at-once`` at a time; each ``--within`` ms
  after sending, spread evenly), while ``--background`` other clients stream ordinary answers. A
  model call is *late* when it reached the upstream more than 10 ms after its client's hang-up. The
  hang-up's time is read in the client just before ``close()``: the FIN or RST cannot reach the
  server earlier (on the loopback it arrives within microseconds after). A call's time is when the
  upstream read its request, after Duet sent it. Both err against Duet: a call counts as later than
  it was. Calls open at a hang-up are timed to their end too. Then as many clients hang up in the
  middle of their body: no call may start for them at all.
- ``tool``: clients hang up on seeing a service tool's ``[calling slow_lookup`` line; any answer call
  after that one starts for a client that is gone.
- ``open``: clients hang up while the reasoning streams, while the answer streams, or (not streamed)
  while the reasoner works: the time from the hang-up to the upstream seeing its stream's
  connection close (its reader wakes on the close: ``tests/scripted_upstream.py``).
- ``stall`` (chat): ``--streams`` long streams read to their end, then the same number that stop
  reading and, once stuck, all hang up at once; meanwhile four clients send one unrelated request
  after another. The worst wait of those that overlap the streams being read, and the worst of
  those that overlap the hang-ups until Duet has cancelled every stream.
- ``memory``: ``duet serve --workers 2``; ``--warm-up`` rounds (the protocols in turn), then
  ``--rounds`` rounds of ``--round-size`` hang-ups at every point of a request (``tests/aborts.py``)
  per protocol; each worker's RSS after each round (once no request is in flight), and its growth
  per round (the least-squares slope over the protocol's rounds, and over them after the first).

Writes ``bench/results/hang_up_costs-<time>.json`` (``record.py``) and prints a summary. Run from the repository
root: ``.venv/bin/python bench/hang_up_costs.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after this script's folder: tests/

from harness import ANSWER, REASONER, ROOT, cpu_seconds, free_port, in_flight, memory_mb, start_duet, stop, wait_up
from tests.aborts import LONG_STORY, PROBE, PROTOCOLS, abort_many, protocol_request, read_until
from record import begin, save

LATE_AFTER = 0.010  # a model call that reaches the upstream later than this after its client's hang-up is late
CLOSED_WITHIN = 0.050  # an upstream stream open at a hang-up must be closed within this


@dataclass
class Upstream:
    """The scripted upstream's process and the file it records model calls in."""

    process: subprocess.Popen[bytes]
    base_url: str
    record: Path

    def calls(self) -> dict[int, dict[str, Any]]:
        """Every model call so far by number: when it arrived, and when it ended (absent: still open)."""
        calls: dict[int, dict[str, Any]] = {}
        ended: dict[int, dict[str, Any]] = {}
        for line in self.record.read_text().splitlines():
            entry = json.loads(line)
            (calls if entry["event"] == "arrived" else ended)[entry["number"]] = entry
        for number, entry in ended.items():
            calls[number] = entry
        return calls

    def wait_ended(self, timeout: float = 10.0) -> int:
        """Until every call has ended (or ``timeout``); the number still open."""
        deadline = time.monotonic() + timeout
        while True:
            still_open = sum(1 for call in self.calls().values() if call["event"] == "arrived")
            if not still_open or time.monotonic() > deadline:
                return still_open
            time.sleep(0.1)


@contextlib.contextmanager
def upstream_process(directory: Path) -> Iterator[Upstream]:
    port = free_port()
    record = directory / "calls.jsonl"
    record.touch()
    process = subprocess.Popen([sys.executable, "-m", "tests.scripted_upstream", "--port", str(port), "--responder",
                                "tests.aborts:abort_responder", "--record", str(record)], cwd=ROOT, stdout=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_up(f"{base_url}/models", process=process)
        yield Upstream(process, base_url, record)
    finally:
        stop(process)


@contextlib.contextmanager
def duet_process(upstream: Upstream, directory: Path, workers: int = 1) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``duet serve`` on both stages of ``upstream`` with the service tool ``slow_lookup``, no keys."""
    port = free_port()
    duet = start_duet(port, {
        "DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER, "DUET_ANSWER_BASE_URL": upstream.base_url,
        "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": "", "DUET_FUNCTION_TOOLS": "tests.aborts:slow_lookup",
        "DUET_PING_INTERVAL": "0.5", "DUET_WORKERS": str(workers), "DUET_STATE_URL": f"sqlite:///{directory}/state-{port}.db",
    })
    try:
        yield port, duet
    finally:
        stop(duet)


# -- clients ------------------------------------------------------------------------------------

def _hang_up(sock: socket.socket, reset: bool) -> float:
    """Closes ``sock`` (with RST if ``reset``, else FIN); when: just before the close, the earliest
    the server can have seen it (a process descheduled right after the close would read the clock late)."""
    if reset:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    now = time.monotonic()
    sock.close()
    return now


async def _connected(port: int, receive_buffer: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def _read_until(sock: socket.socket, marker: bytes, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    seen = b""
    async with asyncio.timeout(timeout):
        while marker not in seen:
            data = await loop.sock_recv(sock, 65536)
            if not data:
                raise RuntimeError(f"the stream ended before {marker!r}: {seen[-300:]!r}")
            seen = seen[-len(marker):] + data


async def hang_up_at(port: int, request: bytes, reset: bool, marker: bytes | None = None, wait: float = 0.0,
                     partial: bool = False) -> float:
    """Sends ``request`` (half of it if ``partial``), reads until ``marker`` (or waits ``wait``
    seconds: a busy loop of this process may make it longer), then hangs up; returns when."""
    sock = await _connected(port)
    try:
        await asyncio.get_running_loop().sock_sendall(sock, request[: len(request) // 2] if partial else request)
        if marker is not None:
            await _read_until(sock, marker)
        elif wait:
            await asyncio.sleep(wait)
    except BaseException:
        sock.close()
        raise
    return _hang_up(sock, reset)


async def _ordinary_streams(port: int, count: int, done: asyncio.Future[None]) -> int:
    """``count`` clients streaming ordinary answers (2 s each), one after another, until ``done``;
    how many answers they read."""
    request = protocol_request("chat", "answer [[background]]", True)
    loop = asyncio.get_running_loop()
    answers = 0

    async def client() -> None:
        nonlocal answers
        while not done.done():
            sock = await _connected(port)
            try:
                await loop.sock_sendall(sock, request)
                await _read_until(sock, b"[DONE]", timeout=60)
                answers += 1
            finally:
                sock.close()

    await asyncio.gather(*(client() for _ in range(count)))
    return answers


async def under_load(port: int, background: int, work: Any) -> Any:
    """Awaits ``work`` while ``background`` clients stream ordinary answers (a server with work to do)."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    load = asyncio.ensure_future(_ordinary_streams(port, background, done))
    try:
        if background:
            await asyncio.sleep(1.0)  # the streams are under way
        return await work
    finally:
        done.set_result(None)
        await load


async def many(jobs: list[Any], at_once: int) -> list[Any]:
    """Runs the coroutines ``jobs``, ``at_once`` at a time; their results in order (an error as itself)."""
    gate = asyncio.Semaphore(at_once)

    async def one(job: Any) -> Any:
        async with gate:
            return await job

    return await asyncio.gather(*(one(job) for job in jobs), return_exceptions=True)


# -- figures --------------------------------------------------------------------------------------

def percentiles(values: list[float]) -> dict[str, float | int | None]:
    """Count, p50, p99 and max of ``values`` (seconds), in milliseconds."""
    if not values:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)
    return {"count": len(ordered), "p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2)}


@dataclass
class CallsOfHangUps:
    """What the upstream saw of the model calls of hung-up requests, by each request's mark."""

    hung_up: dict[str, float]  # mark -> when its client hung up
    calls: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, upstream: Upstream, hung_up: dict[str, float]) -> "CallsOfHangUps":
        return cls(hung_up, [call for call in upstream.calls().values() if call["mark"] in hung_up])

    def started_after(self, models: tuple[str, ...] = (REASONER, ANSWER)) -> list[float]:
        """For each call that started after its client's hang-up: how long after."""
        return [call["received_at"] - self.hung_up[call["mark"]] for call in self.calls
                if call["model"] in models and call["received_at"] > self.hung_up[call["mark"]]]

    def closing_times(self) -> tuple[list[float], int]:
        """For each call open at its client's hang-up, or opened after it: from the hang-up (or its
        start, if later) to its end; and how many have not ended."""
        times, still_open = [], 0
        for call in self.calls:
            hung_up = self.hung_up[call["mark"]]
            if call["event"] == "arrived":
                still_open += 1
            elif call["finished_at"] > hung_up:
                times.append(call["finished_at"] - max(hung_up, call["received_at"]))
        return times, still_open


def late_figures(calls: CallsOfHangUps, clients: int) -> dict[str, Any]:
    after = calls.started_after()
    late = [delay for delay in after if delay > LATE_AFTER]
    closing, still_open = calls.closing_times()
    return {
        "clients": clients, "model_calls": len(calls.calls), "calls_started_after_hang_up": len(after),
        "late_calls": len(late), "late_percent": round(100 * len(late) / max(clients, 1), 2),
        "late_delays": percentiles(late), "closing": percentiles(closing),
        "closed_later_than_50ms": sum(1 for t in closing if t > CLOSED_WITHIN), "left_open": still_open,
    }


# -- parts ----------------------------------------------------------------------------------------

def part_late(port: int, upstream: Upstream, clients: int, at_once: int, within: float, background: int) -> dict[str, Any]:
    """Hang-ups right after the request (within ``within`` seconds, evenly spread), then in the middle
    of the body; ``background`` other clients stream meanwhile."""
    results: dict[str, Any] = {}
    for case, partial in (("before_first_byte", False), ("mid_body", True)):
        marks = [f"{case}-{i}" for i in range(clients)]
        jobs = [hang_up_at(port, protocol_request(PROTOCOLS[i % 3], f"before_first_byte [[{mark}]]", True), reset=i % 2 == 1,
                           partial=partial, wait=within * i / clients) for i, mark in enumerate(marks)]
        times = asyncio.run(under_load(port, background, many(jobs, at_once)))
        hung_up = {mark: t for mark, t in zip(marks, times, strict=True) if isinstance(t, float)}
        wait_idle(port)
        upstream.wait_ended()
        results[case] = late_figures(CallsOfHangUps.of(upstream, hung_up), len(hung_up))
        results[case]["client_errors"] = len(marks) - len(hung_up)
    return results


def part_tool(port: int, upstream: Upstream, clients: int, at_once: int, background: int) -> dict[str, Any]:
    """Hang-ups on a service tool's call line: no answer call may follow (``background`` others stream meanwhile)."""
    marks = [f"tool-{i}" for i in range(clients)]
    jobs = [hang_up_at(port, protocol_request(PROTOCOLS[i % 3], f"service_tool [[{mark}]]", True), reset=i % 2 == 1,
                       marker=b"[calling slow_lookup") for i, mark in enumerate(marks)]
    times = asyncio.run(under_load(port, background, many(jobs, at_once)))
    hung_up = {mark: t for mark, t in zip(marks, times, strict=True) if isinstance(t, float)}
    wait_idle(port)
    upstream.wait_ended()
    calls = CallsOfHangUps.of(upstream, hung_up)
    after = calls.started_after((ANSWER,))
    return {"clients": len(hung_up), "client_errors": len(marks) - len(hung_up), "answer_calls_after_hang_up": len(after),
            "answer_calls_after": percentiles(after), "left_open": calls.closing_times()[1]}


def part_open(port: int, upstream: Upstream, clients: int, at_once: int, background: int) -> dict[str, Any]:
    """Hang-ups while a model call streams: how soon its upstream connection closes (``background``
    others stream meanwhile)."""
    results: dict[str, Any] = {}
    for point in ("reasoning", "answer", "non_stream"):
        marks = [f"open-{point}-{i}" for i in range(clients)]
        jobs = []
        for i, mark in enumerate(marks):
            protocol = PROTOCOLS[i % 3]
            request = protocol_request(protocol, f"{point} [[{mark}]]", point != "non_stream")
            jobs.append(hang_up_at(port, request, reset=i % 2 == 1, marker=read_until(protocol, point), wait=0.3))
        times = asyncio.run(under_load(port, background, many(jobs, at_once)))
        hung_up = {mark: t for mark, t in zip(marks, times, strict=True) if isinstance(t, float)}
        wait_idle(port)
        upstream.wait_ended()
        calls = CallsOfHangUps.of(upstream, hung_up)
        closing, still_open = calls.closing_times()
        results[point] = {"clients": len(hung_up), "client_errors": len(marks) - len(hung_up), "closing": percentiles(closing),
                          "closed_later_than_50ms": sum(1 for t in closing if t > CLOSED_WITHIN), "left_open": still_open,
                          "calls_started_after_hang_up": len(calls.started_after())}
    return results


async def _probes(port: int, clients: int, done: asyncio.Future[None]) -> list[tuple[float, float]]:
    """``clients`` clients sending one unrelated streamed request after another until ``done``: when
    each began, and how long it took."""
    loop = asyncio.get_running_loop()
    request = protocol_request("chat", f"{PROBE} [[probe]]", True)
    waits: list[tuple[float, float]] = []

    async def client() -> None:
        while not done.done():
            started = time.monotonic()
            sock = await _connected(port)
            try:
                await loop.sock_sendall(sock, request)
                await _read_until(sock, b"[DONE]", timeout=120)
            finally:
                sock.close()
            waits.append((started, time.monotonic() - started))

    await asyncio.gather(*(client() for _ in range(clients)))
    return waits


async def _long_streams(port: int, duet_pid: int, upstream: Upstream, count: int, read: bool, mark: str) -> tuple[float, float, float]:
    """``count`` long streams, read to their end; or (``read`` false) read to their first words, left
    unread until stuck, then all hung up at once (RST: data is left unread) and waited for until the
    upstream has seen every one of their model calls end. The window measured: when the streams were
    sent (or hung up), when they were all read (or given up), and Duet's CPU seconds in between."""
    request = protocol_request("chat", f"{LONG_STORY} [[{mark}]]", True)
    loop = asyncio.get_running_loop()
    socks = [await _connected(port, receive_buffer=0 if read else 4096) for _ in range(count)]
    try:
        sent, cpu = time.monotonic(), cpu_seconds(duet_pid)
        await asyncio.gather(*(loop.sock_sendall(sock, request) for sock in socks))
        if read:
            await asyncio.gather(*(_read_until(sock, b"[DONE]", timeout=300) for sock in socks))
            return sent, time.monotonic(), cpu_seconds(duet_pid) - cpu
        await asyncio.gather(*(_read_until(sock, b'"content":"word') for sock in socks))
        await asyncio.sleep(3)  # the buffers between Duet and each client fill, then Duet's own
        cpu = cpu_seconds(duet_pid)
        hung_up = min(_hang_up(sock, reset=True) for sock in socks)
        # The scripted upstream, in another process, is asked over HTTP: there is no event to wait on.
        while any(call["mark"] == mark and call["event"] == "arrived" for call in upstream.calls().values()):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return hung_up, time.monotonic(), cpu_seconds(duet_pid) - cpu
    finally:
        for sock in socks:
            sock.close()


def part_stall(port: int, duet_pid: int, upstream: Upstream, streams: int, probe_clients: int = 4) -> dict[str, Any]:
    """The worst wait of an unrelated request (``probe_clients`` asking one after another) while
    ``streams`` long streams are read to their end, and while the same streams, left unread, are
    cancelled (from their hang-up until the upstream has seen each of their calls end); and the CPU
    time Duet spent in each window."""
    results: dict[str, Any] = {}
    for case in ("read", "unread"):
        async def run() -> tuple[list[tuple[float, float]], tuple[float, float, float]]:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            probes = asyncio.ensure_future(_probes(port, probe_clients, done))
            window = await _long_streams(port, duet_pid, upstream, streams, read=case == "read", mark=f"stall-{case}")
            done.set_result(None)
            return await probes, window

        probes, (begin, end, cpu) = asyncio.run(run())
        during = [wait for started, wait in probes if started < end and started + wait > begin]
        results[case] = {"streams": streams, "window_s": round(end - begin, 2), "duet_cpu_s": round(cpu, 2),
                         "probe_requests": len(during), "probe": percentiles(during)}
        wait_idle(port)
    results["worst_wait_difference_ms"] = round(results["unread"]["probe"]["max_ms"] - results["read"]["probe"]["max_ms"], 1)
    return results


def worker_pids(port: int, workers: int, timeout: float = 30.0) -> list[int]:
    """The processes that serve ``port`` (``duet serve --workers N``): each names itself in its readiness details."""
    found: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(found) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"found {len(found)} of {workers} workers")
        with httpx.Client() as client:  # a connection of its own: the kernel may hand it to any worker
            found.add(client.get(f"http://127.0.0.1:{port}/health/ready", timeout=5).json()["pid"])
    return sorted(found)


def growth_per_round(rss: list[float], skip: int = 0) -> float:
    """The least-squares slope of RSS over the rounds (after the first ``skip``), in MB a round."""
    points = list(enumerate(rss))[skip:]
    if len(points) < 2:
        return float("nan")
    mean_x = statistics.mean(x for x, _ in points)
    mean_y = statistics.mean(y for _, y in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def _memory_round(port: int, pids: list[int], protocol: str, size: int) -> dict[int, float]:
    """``size`` hang-ups in ``protocol`` spread over every point of a request; then, once no request
    is in flight, each worker's RSS."""
    asyncio.run(abort_many(port, "duet", size, "", concurrency=16, protocol=protocol))
    wait_idle(port, len(pids))
    time.sleep(1.0)  # the last runs' teams settle
    return {pid: round(memory_mb(pid)[0], 2) for pid in pids}


def part_memory(upstream: Upstream, directory: Path, rounds: int, round_size: int, workers: int, warm_up: int) -> dict[str, Any]:
    """``warm_up`` rounds (the protocols in turn), then ``rounds`` rounds of each protocol; each
    worker's RSS after each round, and its growth per round over each protocol's rounds (and over
    them after the first, as the issue measured)."""
    results: dict[str, Any] = {"workers": workers, "rounds": rounds, "hang_ups_per_round": round_size, "warm_up_rounds": warm_up}
    with duet_process(upstream, directory, workers) as (port, _):
        pids = worker_pids(port, workers)
        results["rss_started_mb"] = {str(pid): round(memory_mb(pid)[0], 1) for pid in pids}
        warm: dict[int, list[float]] = {pid: [] for pid in pids}
        for number in range(warm_up):
            for pid, rss in _memory_round(port, pids, PROTOCOLS[number % len(PROTOCOLS)], round_size).items():
                warm[pid].append(rss)
        results["warm_up_rss_mb"] = {str(pid): values for pid, values in warm.items()}
        for protocol in PROTOCOLS:
            measured: dict[int, list[float]] = {pid: [] for pid in pids}
            for _ in range(rounds):
                for pid, rss in _memory_round(port, pids, protocol, round_size).items():
                    measured[pid].append(rss)
            results[protocol] = {str(pid): {"rss_mb": values, "growth_mb_per_round": round(growth_per_round(values), 3),
                                            "growth_after_first_mb_per_round": round(growth_per_round(values, 1), 3)}
                                 for pid, values in measured.items()}
            print(f"  memory {protocol}: " + "; ".join(f"worker {pid}: {values[0]:.1f} -> {values[-1]:.1f} MB "
                                                        f"({growth_per_round(values):+.3f} MB/round)" for pid, values in measured.items()),
                  flush=True)
    return results


def wait_idle(port: int, workers: int = 1, timeout: float = 60.0) -> None:
    """Until no request is in flight on any worker: that many answers in a row (each may come from
    any worker) say none is."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 3 * workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Duet did not become idle within {timeout:g} s")
        quiet = quiet + 1 if in_flight(port) == 0 else 0
        time.sleep(0.05)


# -- the run ----------------------------------------------------------------------------------------

def summary(results: dict[str, Any]) -> list[str]:
    lines = []
    for case, figures in results.get("late", {}).items():
        lines.append(f"{case}: {figures['clients']} hang-ups, {figures['model_calls']} model calls, "
                     f"{figures['calls_started_after_hang_up']} started after the hang-up, {figures['late_calls']} later than "
                     f"10 ms ({figures['late_percent']} %, max {figures['late_delays']['max_ms']} ms); open calls closed in "
                     f"p50 {figures['closing']['p50_ms']} / max {figures['closing']['max_ms']} ms, "
                     f"{figures['closed_later_than_50ms']} after 50 ms, {figures['left_open']} left open")
    if "tool" in results:
        tool = results["tool"]
        lines.append(f"tool-call output: {tool['clients']} hang-ups, {tool['answer_calls_after_hang_up']} answer calls after them "
                     f"(max {tool['answer_calls_after']['max_ms']} ms after)")
    for point, figures in results.get("open", {}).items():
        lines.append(f"open stream at a hang-up ({point}): closed in p50 {figures['closing']['p50_ms']} / p99 "
                     f"{figures['closing']['p99_ms']} / max {figures['closing']['max_ms']} ms; {figures['closed_later_than_50ms']} "
                     f"after 50 ms, {figures['left_open']} left open")
    if "stall" in results:
        stall = results["stall"]
        lines.append(f"stall: an unrelated request's worst wait: {stall['read']['probe']['max_ms']} ms while {stall['read']['streams']} "
                     f"streams are read, {stall['unread']['probe']['max_ms']} ms while they are cancelled unread "
                     f"(difference {stall['worst_wait_difference_ms']} ms; p50 {stall['read']['probe']['p50_ms']} / "
                     f"{stall['unread']['probe']['p50_ms']} ms)")
    for protocol in PROTOCOLS:
        if protocol in results.get("memory", {}):
            workers = results["memory"][protocol]
            lines.append(f"memory ({protocol}): growth per round, after {results['memory']['warm_up_rounds']} warm-up rounds: " +
                         ", ".join(f"{w['growth_mb_per_round']:+.3f} MB (worker {pid}; after the first: "
                                   f"{w['growth_after_first_mb_per_round']:+.3f})" for pid, w in workers.items()))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="late,tool,open,stall,memory", help="which parts, comma-separated")
    parser.add_argument("--clients", type=int, default=1000, help="before-first-byte (and mid-body) hang-ups (default 1000)")
    parser.add_argument("--at-once", type=int, default=20, help="clients at a time (default 20)")
    parser.add_argument("--within", type=float, default=5.0,
                        help="before-first-byte clients hang up this many ms after sending, at most (evenly spread; default 5)")
    parser.add_argument("--background", type=int, default=10,
                        help="clients streaming ordinary answers during the late, tool and open parts (default 10)")
    parser.add_argument("--tool-clients", type=int, default=300, help="hang-ups on a tool call's line (default 300)")
    parser.add_argument("--open-clients", type=int, default=300, help="hang-ups at each point of an open stream (default 300)")
    parser.add_argument("--streams", type=int, default=200, help="long streams of the stall part (default 200)")
    parser.add_argument("--rounds", type=int, default=6, help="memory rounds per protocol (default 6)")
    parser.add_argument("--round-size", type=int, default=500, help="hang-ups per memory round (default 500)")
    parser.add_argument("--workers", type=int, default=2, help="workers of the memory part (default 2)")
    parser.add_argument("--warm-up", type=int, default=6,
                        help="memory rounds before the measured ones, the protocols in turn (default 6: RSS levels off after them)")
    parser.add_argument("--label", default="", help="a note kept with the results (which code ran)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))

    run = begin("hang_up_costs")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder, upstream_process(Path(folder)) as upstream:
        directory = Path(folder)
        if parts & {"late", "tool", "open", "stall"}:
            with duet_process(upstream, directory) as (port, duet):
                if "late" in parts:
                    results["late"] = part_late(port, upstream, args.clients, args.at_once, args.within / 1000, args.background)
                if "tool" in parts:
                    results["tool"] = part_tool(port, upstream, args.tool_clients, args.at_once, args.background)
                if "open" in parts:
                    results["open"] = part_open(port, upstream, args.open_clients, args.at_once, args.background)
                if "stall" in parts:
                    results["stall"] = part_stall(port, duet.pid, upstream, args.streams)
        if "memory" in parts:
            results["memory"] = part_memory(upstream, directory, args.rounds, args.round_size, args.workers, args.warm_up)
    results["summary"] = summary(results)
    save(run, results, args, args.label)
    print("\n".join(results["summary"]))


if __name__ == "__main__":
    main()
