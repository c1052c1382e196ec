"""Duet's memory while clients stop reading their streams.

Starts the scripted upstream (``tests/scripted_upstream.py``, a long answer) and ``duet serve`` as
separate processes on loopback, opens ``--streams`` streamed requests that read the response's
head and first bytes and then read nothing more (a small receive window, as a stuck client's
fills), and samples Duet's resident memory and its in-flight count every ``--interval`` seconds.
Without backpressure Duet keeps reading the upstream into memory for clients that read nothing;
with it, each stream holds a bounded amount until ``write_timeout`` cancels it.

Run from the repository root: ``python bench/slow_readers.py`` (``--help`` for options). The samples
go to ``bench/results/slow_readers-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import json
import socket
import time


from harness import in_flight, memory_mb, served
from record import begin, save


def unread_stream(port: int) -> socket.socket:
    """A streamed request whose client reads the first bytes of the answer and then nothing more."""
    body = json.dumps({"model": "duet", "stream": True, "messages": [{"role": "user", "content": "Write a long story."}]}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    sock.settimeout(30)
    received = b""
    while b'"content":"word' not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"the stream ended early: {received[-300:]!r}")
        received += chunk
    return sock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=20, help="clients that stop reading (default 20)")
    parser.add_argument("--answer-tokens", type=int, default=1_000_000, help="length of the upstream's answer, in tokens")
    parser.add_argument("--seconds", type=float, default=90.0, help="how long to watch (default 90)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples (default 5)")
    parser.add_argument("--write-timeout", type=float, default=None, help="DUET_WRITE_TIMEOUT (default: the service's)")
    parser.add_argument("--json", action="store_true", help="print the samples as JSON")
    args = parser.parse_args()

    run = begin("slow_readers")
    env = {"DUET_WRITE_TIMEOUT": str(args.write_timeout)} if args.write_timeout is not None else {}
    sockets: list[socket.socket] = []
    samples: list[dict[str, float | str]] = []
    with served(["--reasoning-tokens", "40", "--answer-tokens", str(args.answer_tokens)], env) as services:
        try:
            started_mb = memory_mb(services.duet.pid)[0]
            sockets = [unread_stream(services.port) for _ in range(args.streams)]
            opened = time.monotonic()
            while True:
                elapsed = time.monotonic() - opened
                rss, peak = memory_mb(services.duet.pid)
                count = in_flight(services.port)
                samples.append({"seconds": round(elapsed, 1), "rss_mb": round(rss, 1), "growth_mb": round(rss - started_mb, 1),
                                "peak_mb": round(peak, 1), "in_flight": "-" if count is None else str(count)})
                if elapsed >= args.seconds:
                    break
                time.sleep(min(args.interval, args.seconds - elapsed))
        finally:
            for sock in sockets:
                sock.close()
    save(run, {"rss_started_mb": round(started_mb, 1), "samples": samples}, args)
    if args.json:
        print(json.dumps({"rss_started_mb": round(started_mb, 1), "samples": samples}, indent=2))
        return
    print(f"{args.streams} streams that stop reading; Duet's RSS at start {started_mb:.0f} MB")
    print("  seconds   RSS MB   growth MB   peak MB   in flight")
    for s in samples:
        print(f"  {s['seconds']:>7}   {s['rss_mb']:>6.0f}   {s['growth_mb']:>9.0f}   {s['peak_mb']:>7.0f}   {s['in_flight']:>9}")


if __name__ == "__main__":
    main()
