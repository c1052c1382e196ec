"""The HTTP edge under hostile clients: body sizes, huge heads, slow connections, early hang-ups.

Starts the scripted upstream in-process and ``duet serve`` (default settings unless a scenario
says otherwise) as a subprocess on loopback, one fresh server per scenario, and prints one line
of JSON per scenario:

- ``bodies``: 10 oversized bodies (40 MB, over the 32 MiB default) sent at once, with
  Content-Length and chunked; the server's peak RSS growth (VmHWM - RSS at start) and statuses;
- ``valid_bodies``: 10 and 20 valid 24.7 MB bodies (under the 32 MiB limit) sent at once, then 20
  with ``DUET_MAX_PENDING_BODY_BYTES`` at 64 MiB: peak RSS growth and statuses (the byte budget
  for bodies in flight, ``max_pending_body_bytes``, is what bounds this);
- ``slow_bodies``: 256 connections (the default ``max_concurrent_requests``) each sending a request
  head and one byte of its body; the status a normal completion gets meanwhile;
- ``big_body``: one 100 MB body: peak RSS growth and status;
- ``huge_header``: a 64 MB ``Authorization`` header on one connection while another client asks
  ``GET /v1/models`` every 50 ms: that client's slowest answer, and what the huge one got;
- ``slow_connections``: 1,100 connections that send half a request head, with the server's soft
  open-file limit at 1024; whether a normal request is still served, and how many of the slow
  connections the server closed within ``header_timeout`` + 2 s;
- ``early_hangups``: 250 requests (half streamed) whose client resets the connection 0-20 ms after
  sending it, before any byte of the answer; how many model calls the upstream saw, and how many
  of those started after the client had hung up;
- ``sigterm_drain``: five long streams in flight, SIGTERM, ``DUET_SHUTDOWN_TIMEOUT=2``: how long
  the process takes to exit, and how each stream ended.

Run from the repository root: ``.venv/bin/python bench/edge.py [scenario ...]``. The lines go to
``bench/results/edge-<time>.json`` too (``record.py``).
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import DuetServer  # noqa: E402
from tests.scripted_upstream import Reply, ScriptedUpstream  # noqa: E402
from record import begin, save  # noqa: E402

KEY = "bench-key"
MB = 1_000_000


def memory_mb(pid: int) -> tuple[float, float]:
    """Resident set size now, and its peak, of a process (from /proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def start_duet(upstream: ScriptedUpstream, directory: Path, **env: str) -> DuetServer:
    return DuetServer(
        [],
        {
            "DUET_API_KEYS": KEY,
            "DUET_REASONER_BASE_URL": upstream.base_url,
            "DUET_REASONER_MODEL": "bench-r1",
            "DUET_ANSWER_BASE_URL": upstream.base_url,
            "DUET_ANSWER_MODEL": "bench-answer",
            "DUET_LOG_LEVEL": "warning",
            **env,
        },
        directory / f"duet-{time.monotonic_ns()}.log",
    )


def body_of(size: int) -> bytes:
    head = b'{"model":"duet","messages":[{"role":"user","content":"'
    tail = b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def post_raw(port: int, body: bytes, *, chunked: bool) -> str:
    """Sends one POST with ``body`` (Content-Length or chunked); returns the status line or what happened."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {len(body)}\r\n\r\n"
    try:
        writer.write(head.encode())
        step = 1 << 20
        for start in range(0, len(body), step):
            piece = body[start : start + step]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # the server answered early and closed: read what it said
    try:
        line = await asyncio.wait_for(reader.readline(), 120)
        return line.decode().strip() or "closed"
    except (TimeoutError, ConnectionError, OSError) as exc:
        return type(exc).__name__
    finally:
        writer.close()


def bodies(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    duet = start_duet(upstream, directory)
    try:
        start_rss, _ = memory_mb(duet.process.pid)
        payload = body_of(40 * MB)

        async def run() -> list[str]:
            sends = [post_raw(duet.port, payload, chunked=i % 2 == 1) for i in range(10)]
            return await asyncio.gather(*sends)

        began = time.monotonic()
        statuses = asyncio.run(run())
        _, peak = memory_mb(duet.process.pid)
        return {"scenario": "bodies", "bodies": "10 x 40 MB (5 Content-Length, 5 chunked)", "seconds": round(time.monotonic() - began, 2),
                "rss_start_mb": round(start_rss), "peak_growth_mb": round(peak - start_rss), "statuses": sorted(set(statuses))}
    finally:
        duet.stop()


def valid_bodies(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    payload = body_of(24_700_000)
    runs = []
    for count, env in ((10, {}), (20, {}), (20, {"DUET_MAX_PENDING_BODY_BYTES": str(64 * 1024 * 1024)})):
        duet = start_duet(upstream, directory, **env)
        try:
            start_rss, _ = memory_mb(duet.process.pid)

            async def run() -> list[str]:
                return await asyncio.gather(*(post_raw(duet.port, payload, chunked=False) for _ in range(count)))

            statuses = asyncio.run(run())
            _, peak = memory_mb(duet.process.pid)
            runs.append({"bodies": f"{count} x 24.7 MB", **env, "rss_start_mb": round(start_rss), "peak_mb": round(peak),
                         "statuses": {status: statuses.count(status) for status in sorted(set(statuses))}})
        finally:
            duet.stop()
    return {"scenario": "valid_bodies", "runs": runs}


def slow_bodies(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    duet = start_duet(upstream, directory)
    slow: list[socket.socket] = []
    try:
        for _ in range(256):
            sock = socket.create_connection(("127.0.0.1", duet.port))
            sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\nAuthorization: Bearer {KEY}\r\n"
                         "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode())
            slow.append(sock)
        time.sleep(0.5)
        response = httpx.post(f"{duet.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                              json={"model": "duet", "messages": [{"role": "user", "content": "hi"}]})
        return {"scenario": "slow_bodies", "slow": len(slow), "completion_meanwhile": response.status_code,
                "code": response.json().get("error", {}).get("code") if response.status_code != 200 else None}
    finally:
        for sock in slow:
            sock.close()
        duet.stop()


def big_body(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    duet = start_duet(upstream, directory)
    try:
        start_rss, _ = memory_mb(duet.process.pid)
        status = asyncio.run(post_raw(duet.port, body_of(100 * MB), chunked=False))
        _, peak = memory_mb(duet.process.pid)
        return {"scenario": "big_body", "rss_start_mb": round(start_rss), "peak_growth_mb": round(peak - start_rss), "status": status}
    finally:
        duet.stop()


def huge_header(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    duet = start_duet(upstream, directory)
    outcome: dict[str, object] = {}

    def send_huge() -> None:
        began = time.monotonic()
        with socket.create_connection(("127.0.0.1", duet.port)) as sock:
            sock.settimeout(60)
            try:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: duet\r\nAuthorization: Bearer " + b"k" * (64 * MB) + b"\r\n\r\n")
                outcome["huge"] = sock.recv(200).split(b"\r\n", 1)[0].decode() or "closed"
            except OSError as exc:
                outcome["huge"] = type(exc).__name__
        outcome["huge_seconds"] = round(time.monotonic() - began, 2)

    try:
        thread = threading.Thread(target=send_huge)
        slowest = 0.0
        with httpx.Client(base_url=duet.base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client:
            client.get("/v1/models")
            thread.start()
            while thread.is_alive():
                began = time.monotonic()
                client.get("/v1/models").raise_for_status()
                slowest = max(slowest, time.monotonic() - began)
                time.sleep(0.05)
        thread.join()
        return {"scenario": "huge_header", "header": "64 MB Authorization", "other_client_slowest_s": round(slowest, 3), **outcome}
    finally:
        duet.stop()


def slow_connections(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # inherited by duet serve
    try:
        duet = start_duet(upstream, directory, DUET_HEADER_TIMEOUT="3")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))  # this process holds 1,100 sockets
    slow: list[socket.socket] = []
    try:
        for _ in range(1100):
            sock = socket.create_connection(("127.0.0.1", duet.port))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\n")
            slow.append(sock)
        time.sleep(0.5)
        began = time.monotonic()
        try:
            status = httpx.get(f"{duet.base_url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        served_in = round(time.monotonic() - began, 3)
        time.sleep(3 + 2)
        closed = 0
        for sock in slow:
            sock.setblocking(False)
            try:
                closed += sock.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        log = duet.log.read_text()
        return {"scenario": "slow_connections", "slow": len(slow), "normal_request": status, "served_in_s": served_in,
                "closed_by_server_within_5s": closed, "too_many_open_files_in_log": "Too many open files" in log}
    finally:
        for sock in slow:
            sock.close()
        duet.stop()


def early_hangups(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    duet = start_duet(upstream, directory)
    try:
        upstream.reset()
        upstream.set_default(lambda body: Reply(reasoning=["thinking"], content=["ok"], delay=0.2))
        hung_up_at: dict[str, float] = {}
        rng = random.Random(7)
        for i in range(250):
            marker = f"request-{i}"
            body = json.dumps({"model": "duet", "stream": i % 2 == 0, "messages": [{"role": "user", "content": marker}]}).encode()
            request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: duet\r\nAuthorization: Bearer {KEY}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
            sock = socket.create_connection(("127.0.0.1", duet.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close = RST
            sock.sendall(request)
            time.sleep(rng.uniform(0, 0.02))  # hang up 0-20 ms later: before the first byte (the reasoner takes 200 ms)
            hung_up_at[marker] = time.monotonic()
            sock.close()
        time.sleep(2)
        late: list[float] = []
        for record in upstream.requests:
            raw = record.raw.decode(errors="replace")
            marker = next((m for m in hung_up_at if f'"{m}"' in raw), None)
            if marker is not None and record.received_at > hung_up_at[marker]:
                late.append(round((record.received_at - hung_up_at[marker]) * 1000, 1))
        return {"scenario": "early_hangups", "requests": 250, "reached_upstream": len(upstream.requests),
                "model_calls_started_after_the_hangup": len(late), "ms_after_the_hangup": sorted(late)}
    finally:
        duet.stop()


def sigterm_drain(upstream: ScriptedUpstream, directory: Path) -> dict[str, object]:
    """Five long streams in flight (20 s of reasoning each), then SIGTERM, with a 2 s drain time."""
    duet = start_duet(upstream, directory, DUET_SHUTDOWN_TIMEOUT="2")
    upstream.reset()
    upstream.set_default(lambda body: Reply(reasoning=[f"step {i} " for i in range(200)], delay_between=0.1))
    endings: list[str] = []

    def read_stream() -> None:
        body = {"model": "duet", "stream": True, "messages": [{"role": "user", "content": "long"}]}
        try:
            with httpx.stream("POST", f"{duet.base_url}/v1/chat/completions", json=body, timeout=60,
                              headers={"Authorization": f"Bearer {KEY}"}) as response:
                last = b""
                for chunk in response.iter_raw():
                    last = (last + chunk)[-400:]
            endings.append("one error event, clean end" if b'"server_shutting_down"' in last else "clean end, no error event")
        except httpx.HTTPError as exc:
            endings.append(f"cut: {type(exc).__name__}")

    threads = [threading.Thread(target=read_stream) for _ in range(5)]
    for thread in threads:
        thread.start()
    while len(upstream.requests) < 5:
        time.sleep(0.05)
    time.sleep(0.5)
    signalled = time.monotonic()
    duet.process.terminate()
    try:
        duet.process.wait(20)
        exited = f"{time.monotonic() - signalled:.1f} s"
    except Exception:  # noqa: BLE001 - still running: report it, then stop it
        exited = "still running after 20 s"
        duet.process.kill()
    for thread in threads:
        thread.join(30)
    duet.stop()
    return {"scenario": "sigterm_drain", "streams": 5, "drain_s": 2, "exited_after_sigterm": exited, "streams_ended": sorted(endings)}


SCENARIOS = {f.__name__: f for f in (bodies, valid_bodies, slow_bodies, big_body, huge_header, slow_connections, early_hangups, sigterm_drain)}


def main() -> None:
    chosen = sys.argv[1:] or list(SCENARIOS)
    run = begin("edge")
    figures: list[dict[str, object]] = []
    with ScriptedUpstream() as upstream, tempfile.TemporaryDirectory() as tmp:
        upstream.set_default(lambda body: Reply(reasoning=["thinking"], content=["ok"], delay=0.2))
        for name in chosen:
            figures.append(SCENARIOS[name](upstream, Path(tmp)))
            print(json.dumps(figures[-1]), flush=True)
    save(run, figures, {"scenarios": chosen})


if __name__ == "__main__":
    main()
