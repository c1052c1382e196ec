"""A client that stops reading: Duet stops reading the upstream, holds a bounded amount for it, and
after ``write_timeout`` cancels the stream, upstream call included."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.hang_ups import alarming_lines
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.waiting import wait_for

WRITE_TIMEOUT = 2.0
PIECE = "lorem ipsum " * 800  # ~9.6 KB of answer text per upstream chunk
PIECES = 10_000  # ~96 MB of answer: far more than the socket buffers on the way hold
SOCKET_BUFFERS = 45 * 1024 * 1024  # what loopback sockets may hold (kernel autotuning: up to 32 MB received, 4 MB sent, ...)
REQUEST_LINE = "POST /v1/chat/completions status="  # a request's own log line, written at its end


@pytest.fixture(scope="module")
def patient_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """A server with a short write timeout."""
    directory = tmp_path_factory.mktemp("backpressure")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({
        "ping_interval": 0.3,
        "write_timeout": WRITE_TIMEOUT,
        "pipelines": [{"name": "duet", "reasoner": {"base_url": upstream.base_url, "model": REASONER},
                       "answer": {"base_url": upstream.base_url, "model": ANSWER}}],
    }))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY}, directory / "duet.log")
    yield server
    server.stop()


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def open_stream(port: int) -> tuple[socket.socket, bytes]:
    """Sends a streamed request and reads until the answer has begun; returns the socket and what it read."""
    body = json.dumps({"model": "duet", "stream": True, "messages": [{"role": "user", "content": "write a lot"}]}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # a small window, as a stuck client's fills
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    sock.settimeout(10)
    received = b""
    while b"lorem" not in received:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    assert received.startswith(b"HTTP/1.1 200")
    return sock, received


def test_a_client_that_stops_reading_stops_the_upstream_then_is_cut_off(
    patient_duet: DuetServer, upstream: ScriptedUpstream
) -> None:
    upstream.script(ANSWER, Reply(content=[PIECE] * PIECES))
    patient_duet.wait_idle()
    rss_before = rss_mb(patient_duet.process.pid)
    log_start = patient_duet.log.stat().st_size
    sock, _ = open_stream(patient_duet.port)  # and then reads nothing more
    try:
        assert wait_for(lambda: upstream.requests_for(ANSWER) != [])
        answer_call = upstream.requests_for(ANSWER)[0]
        # The upstream's writes stall: Duet stopped reading because its client did.
        assert wait_for(lambda: answer_call.stalled_for() > 0.5, WRITE_TIMEOUT), answer_call
        written = answer_call.bytes_written
        assert written < SOCKET_BUFFERS, f"the upstream wrote {written} bytes for a client that reads nothing"
        assert wait_for(lambda: answer_call.stalled_for() > 1.0, WRITE_TIMEOUT), answer_call
        assert answer_call.bytes_written == written and answer_call.stalled_for() > 1.0  # still stalled, nothing taken
        # What Duet holds for the stream meanwhile is bounded (socket buffers and a bounded event channel).
        grown = rss_mb(patient_duet.process.pid) - rss_before
        assert grown < 40, f"Duet's memory grew by {grown:.0f} MB for one unread stream"
        # After the write timeout the stream is cancelled, and with it the upstream call.
        assert answer_call.ended.wait(WRITE_TIMEOUT + 5) and answer_call.aborted
        assert answer_call.bytes_written == written
        assert patient_duet.wait_idle(5)["in_flight"] == 0
        # The server has logged what it had to say: the request's own line comes last, at its end.
        assert wait_for(lambda: REQUEST_LINE in patient_duet.log.read_text()[log_start:]), patient_duet.log.read_text()[log_start:]
    finally:
        sock.close()
    with patient_duet.log.open() as log:
        log.seek(log_start)
        new = log.read()
    assert "stopped a stream: its client took no data for 2s (write_timeout)" in new
    assert alarming_lines(new) == [], new[-3000:]


def test_a_slow_reader_still_gets_everything(patient_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """Backpressure is not a timeout: a client that reads slowly but steadily gets the whole answer."""
    pieces = 300
    upstream.script(ANSWER, Reply(content=[PIECE] * pieces))
    sock, received = open_stream(patient_duet.port)
    try:
        while not received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
            time.sleep(0.002)  # slower than Duet can write, never silent for long
            chunk = sock.recv(8192)
            assert chunk
            received += chunk
    finally:
        sock.close()
    assert received.count(b"lorem") >= (pieces - 1) * 800
    answer_call = upstream.requests_for(ANSWER)[0]
    assert answer_call.ended.wait(5) and not answer_call.aborted


def test_a_client_that_stops_reading_a_collected_answer_loses_its_connection(
    patient_duet: DuetServer, upstream: ScriptedUpstream
) -> None:
    """A non-streamed answer is written with the same write timeout: a client that takes none of
    it is cut off (not sent the whole body whenever it comes back), quietly."""
    pieces = 2000  # ~19 MB of answer: far more than the socket buffers on the way hold
    upstream.script(ANSWER, Reply(content=[PIECE] * pieces))
    log_start = patient_duet.log.stat().st_size
    body = json.dumps({"model": "duet", "messages": [{"role": "user", "content": "write a lot"}]}).encode()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect(("127.0.0.1", patient_duet.port))
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        assert wait_for(lambda: upstream.requests_for(ANSWER) != [])
        assert upstream.requests_for(ANSWER)[0].ended.wait(10)  # collected: the answer is being written now
        assert wait_for(lambda: "(write_timeout)" in patient_duet.log.read_text()[log_start:], WRITE_TIMEOUT + 5)
        received = 0
        sock.settimeout(5)
        try:
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass  # the connection was dropped with what was still buffered for it
    assert received < len(PIECE) * pieces, "the whole answer still reached a client that had stopped reading"
    assert wait_for(lambda: REQUEST_LINE in patient_duet.log.read_text()[log_start:]), patient_duet.log.read_text()[log_start:]
    with patient_duet.log.open() as log:
        log.seek(log_start)
        new = log.read()
    assert "stopped a response: its client took no data for 2s (write_timeout)" in new
    assert alarming_lines(new) == [], new[-3000:]


def test_a_write_timeout_shorter_than_the_ping_interval_is_kept(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """A blocked write is given up after write_timeout, even when no ping is due for much longer."""
    write_timeout, ping_interval = 1.0, 10.0
    server = DuetServer([], {"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
                             "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": API_KEY,
                             "DUET_WRITE_TIMEOUT": str(write_timeout), "DUET_PING_INTERVAL": str(ping_interval)},
                        tmp_path / "duet.log")
    try:
        upstream.script(ANSWER, Reply(content=[PIECE] * PIECES))
        sock, _ = open_stream(server.port)  # and then reads nothing more
        try:
            assert wait_for(lambda: upstream.requests_for(ANSWER) != [])
            answer_call = upstream.requests_for(ANSWER)[0]
            assert wait_for(lambda: answer_call.stalled_for() > 0.1, 10), answer_call
            assert answer_call.ended.wait(ping_interval / 2) and answer_call.aborted  # not only at the next ping
        finally:
            sock.close()
    finally:
        server.stop()


def test_a_reading_client_gets_a_large_collected_answer_whole(patient_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """Written in pieces under the write timeout, a collected answer still arrives byte for byte."""
    pieces = 150  # ~1.4 MB: many pieces, and not a multiple of their size
    upstream.script(ANSWER, Reply(content=[PIECE] * pieces + ["end"]))
    response = httpx.post(f"{patient_duet.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": "duet", "messages": [{"role": "user", "content": "write a lot"}]}, timeout=30)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == PIECE * pieces + "end"
