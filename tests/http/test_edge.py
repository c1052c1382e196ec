"""The HTTP edge against hostile and careless clients, over real sockets: body and head limits,
slow connections, the connection and concurrency caps, the surface (content type, CORS, docs,
health, readiness, access log, trailing slashes) and hang-ups before the run starts."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, free_port
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.waiting import wait_for

MAX_BODY = 100_000
MAX_HEAD = 8_192
TIMEOUT = 1.0  # header and body timeouts of the edge server
MAX_CONNECTIONS = 24
MAX_RUNNING = 2
USER = [{"role": "user", "content": "hi"}]


def pipeline_env(upstream: ScriptedUpstream) -> dict[str, str]:
    return {
        "DUET_REASONER_BASE_URL": upstream.base_url,
        "DUET_REASONER_MODEL": REASONER,
        "DUET_ANSWER_BASE_URL": upstream.base_url,
        "DUET_ANSWER_MODEL": ANSWER,
        "DUET_API_KEYS": API_KEY,
        "DUET_PING_INTERVAL": "0.2",
    }


@pytest.fixture(scope="module")
def edge(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """A server with small limits, configured by DUET_* variables."""
    directory = tmp_path_factory.mktemp("edge")
    server = DuetServer([], {
        **pipeline_env(upstream),
        "DUET_MAX_BODY_BYTES": str(MAX_BODY),
        "DUET_MAX_HEADER_BYTES": str(MAX_HEAD),
        "DUET_HEADER_TIMEOUT": str(TIMEOUT),
        "DUET_BODY_TIMEOUT": str(TIMEOUT),
        "DUET_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "DUET_MAX_CONCURRENT_REQUESTS": str(MAX_RUNNING),
    }, directory / "duet.log")
    yield server
    server.stop()


def request_head(port: int, *, length: int | None = None, chunked: bool = False, extra: str = "") -> bytes:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\n{extra}")
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    return (head + "\r\n").encode()


def read_response(sock: socket.socket, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one Content-Length response (what the edge's refusals are)."""
    return read_responses(sock, 1, timeout)[0]


def read_responses(sock: socket.socket, count: int, timeout: float) -> list[tuple[int, dict[str, str], bytes]]:
    """``count`` Content-Length responses in a row on one connection: pipelined answers may arrive in
    one read. A connection closed in the middle of a body gives what came of it."""
    sock.settimeout(timeout)
    data = b""
    answers: list[tuple[int, dict[str, str], bytes]] = []
    while len(answers) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            lines = data[:head_end].decode().split("\r\n")
            headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
            status, body_end = int(lines[0].split()[1]), head_end + 4 + int(headers.get("content-length", 0))
            if len(data) >= body_end:
                answers.append((status, headers, data[head_end + 4 : body_end]))
                data = data[body_end:]
                continue
        piece = sock.recv(65536)
        if not piece:
            if head_end < 0:
                raise ConnectionError(f"closed after {data!r}")
            answers.append((status, headers, data[head_end + 4 :]))
            break
        data += piece
    return answers


def closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def rss_peak_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def error_code(body: bytes) -> str:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error["code"]  # type: ignore[no-any-return]


# -- request bodies ------------------------------------------------------------------------------

def test_declared_body_over_the_limit_is_refused_before_it_is_read(edge: DuetServer, upstream: ScriptedUpstream) -> None:
    with socket.create_connection(("127.0.0.1", edge.port)) as sock:
        sock.sendall(request_head(edge.port, length=50 * MAX_BODY) + b'{"model":')  # the rest never comes
        began = time.monotonic()
        status, _headers, body = read_response(sock, timeout=5)
        assert status == 413 and error_code(body) == "request_too_large"
        assert time.monotonic() - began < TIMEOUT  # at once: not after waiting for the body
        assert closed_by_server(sock, TIMEOUT + 1)  # the rest of the body may not trickle in for longer
    assert upstream.requests == []


def test_chunked_body_is_refused_as_soon_as_it_passes_the_limit(edge: DuetServer, upstream: ScriptedUpstream) -> None:
    piece = b"x" * 16_384
    sent = 0
    with socket.create_connection(("127.0.0.1", edge.port)) as sock:
        sock.sendall(request_head(edge.port, chunked=True))
        sock.settimeout(0.05)
        answer = b""
        while not answer and sent < 400 * MAX_BODY:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # closed after answering: read what was said
                break
        sock.settimeout(5)
        while b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert sent < 100 * MAX_BODY  # refused while the client was still sending, not after reading it all
    assert upstream.requests == []


def test_oversized_bodies_at_once_keep_memory_flat(edge: DuetServer) -> None:
    """Ten 8 MB bodies (80x the limit), half chunked, half with Content-Length, all at once."""
    body = b'{"model":"duet","messages":[{"role":"user","content":"' + b"x" * 8_000_000 + b'"}]}'

    def send(chunked: bool) -> int:
        with socket.create_connection(("127.0.0.1", edge.port)) as sock:
            try:
                sock.sendall(request_head(edge.port, chunked=chunked, length=None if chunked else len(body)))
                for start in range(0, len(body), 1 << 20):
                    part = body[start : start + (1 << 20)]
                    sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            except OSError:
                pass  # refused and closed while sending
            return read_response(sock, timeout=10)[0]

    before = rss_peak_mb(edge.process.pid)
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        statuses = list(pool.map(send, [i % 2 == 0 for i in range(10)]))
    assert statuses == [413] * 10
    assert rss_peak_mb(edge.process.pid) - before < 20  # the bodies are 80 MB together


def test_slow_body_gets_408(edge: DuetServer, upstream: ScriptedUpstream) -> None:
    with socket.create_connection(("127.0.0.1", edge.port)) as sock:
        sock.sendall(request_head(edge.port, length=1000) + b'{"model": "duet", ')
        began = time.monotonic()
        status, _, body = read_response(sock, timeout=TIMEOUT + 5)
        assert status == 408 and error_code(body) == "request_timeout"
        assert TIMEOUT - 0.1 < time.monotonic() - began < TIMEOUT + 2
        assert closed_by_server(sock, 2)
    assert upstream.requests == []


# -- request heads and connections ----------------------------------------------------------------

def served_promptly(server: DuetServer) -> float:
    began = time.monotonic()
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200
    return time.monotonic() - began


def test_slow_and_silent_connections_are_closed_while_others_are_served(edge: DuetServer) -> None:
    with socket.create_connection(("127.0.0.1", edge.port)) as slow, socket.create_connection(("127.0.0.1", edge.port)) as silent:
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        began = time.monotonic()
        assert served_promptly(edge) < 0.5
        assert closed_by_server(slow, TIMEOUT + 2) and closed_by_server(silent, 1)
        assert time.monotonic() - began < TIMEOUT + 1.5


def test_a_kept_alive_connections_next_head_is_timed_too(edge: DuetServer) -> None:
    """After a response, the next head on the same connection gets the same time limit, counted from
    its first byte: one that stops half-way, one that trickles in for longer than the limit, one that
    came in the same read as the request before it, and blank lines (which begin no head) are closed;
    one that comes in pieces within the limit is served."""
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    connections = [socket.create_connection(("127.0.0.1", edge.port)) for _ in range(5)]
    try:
        stalled, trickling, pieces, blank, pipelined = connections
        for sock in (stalled, trickling, pieces, blank):
            sock.sendall(request)
            assert read_response(sock, timeout=5)[0] == 200
        began = time.monotonic()
        pipelined.sendall(request + request[:20])  # a whole request, and the start of the next one
        assert read_response(pipelined, timeout=5)[0] == 200
        for sock in (stalled, trickling, pieces):
            sock.sendall(request[:10])
        blank.sendall(b"\r\n")
        time.sleep(TIMEOUT / 4)
        pieces.sendall(request[10:])
        assert read_response(pieces, timeout=5)[0] == 200
        for piece in (request[10:14], request[14:18]):  # each read within the limit, the head not
            time.sleep(TIMEOUT / 2)
            with contextlib.suppress(OSError):
                trickling.sendall(piece)
        for sock in (stalled, trickling, blank, pipelined):
            assert closed_by_server(sock, TIMEOUT + 2)
        assert time.monotonic() - began < TIMEOUT + 1.5
    finally:
        for sock in connections:
            sock.close()


def test_huge_header_gets_431_early_without_stalling_others(edge: DuetServer) -> None:
    outcome: dict[str, Any] = {}

    def send_huge() -> None:
        with socket.create_connection(("127.0.0.1", edge.port)) as sock:
            began = time.monotonic()
            try:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"k" * 64_000_000 + b"\r\n\r\n")
            except OSError:
                pass  # refused and closed while sending
            try:
                outcome["status"] = read_response(sock, timeout=5)[0]
            except OSError as exc:
                outcome["status"] = type(exc).__name__
            outcome["seconds"] = time.monotonic() - began

    sender = threading.Thread(target=send_huge)
    sender.start()
    slowest = 0.0
    while sender.is_alive():
        slowest = max(slowest, served_promptly(edge))
        time.sleep(0.02)
    sender.join()
    assert outcome["status"] in (431, "ConnectionResetError"), outcome
    # Without the head limit a 64 MB header stalls every client for 5-18 s; the bounds leave room for a loaded machine.
    assert outcome["seconds"] < 5 and slowest < 2, (outcome, slowest)


def test_head_just_under_the_limit_is_served(edge: DuetServer) -> None:
    padding = "p" * (MAX_HEAD - 400)
    response = httpx.get(f"{edge.base_url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}", "X-Padding": padding})
    assert response.status_code == 200


def test_connections_over_the_cap_are_closed_at_once(edge: DuetServer) -> None:
    """Beyond the cap the connection that waited longest for its head goes (a slow or silent
    client), so a flood of them never keeps a working client out."""
    sockets = [socket.create_connection(("127.0.0.1", edge.port)) for _ in range(MAX_CONNECTIONS + 6)]
    try:
        # The six over the cap are closed at once: well within the header timeout, which would close the rest.
        wait_for(lambda: sum(closed_by_server(sock, 0.001) for sock in sockets) >= 6, TIMEOUT / 2)
        closed = [closed_by_server(sock, 0.001) for sock in sockets]
        assert sum(closed) == 6, closed
        assert served_promptly(edge) < 0.5  # while the cap is full of silent connections
    finally:
        for sock in sockets:
            sock.close()


def test_a_cap_full_of_idle_kept_alive_connections_makes_room(edge: DuetServer) -> None:
    request = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n\r\n".encode()
    sockets = [socket.create_connection(("127.0.0.1", edge.port)) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in sockets:
            sock.sendall(request)
            assert read_response(sock, timeout=5)[0] == 200
        assert served_promptly(edge) < 0.5  # an idle connection made room
        assert sum(closed_by_server(sock, 0.001) for sock in sockets) == 1
    finally:
        for sock in sockets:
            sock.close()


def test_idle_keep_alive_connections_outlive_client_pools(edge: DuetServer) -> None:
    """Client pools drop idle connections after ~5 s; the server keeps them longer, so it never
    closes one a client is about to reuse."""
    with socket.create_connection(("127.0.0.1", edge.port)) as sock:
        request = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n\r\n".encode()
        sock.sendall(request)
        assert read_response(sock, timeout=5)[0] == 200
        time.sleep(5.5)
        sock.sendall(request)
        assert read_response(sock, timeout=5)[0] == 200


# -- concurrency cap ----------------------------------------------------------------------------

def test_completions_over_the_concurrency_cap_get_503_with_retry_after(edge: DuetServer, upstream: ScriptedUpstream) -> None:
    slow = Reply(reasoning=["slowly"], delay=1.5)
    upstream.script(REASONER, slow, slow)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with concurrent.futures.ThreadPoolExecutor(MAX_RUNNING) as pool:
        running = [pool.submit(httpx.post, f"{edge.base_url}/v1/chat/completions", headers=headers, timeout=30,
                               json={"model": "duet", "messages": USER}) for _ in range(MAX_RUNNING)]
        deadline = time.monotonic() + 5
        while len(upstream.requests_for(REASONER)) < MAX_RUNNING and time.monotonic() < deadline:
            time.sleep(0.02)
        refused = httpx.post(f"{edge.base_url}/v1/chat/completions", headers=headers, json={"model": "duet", "messages": USER})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert error_code(refused.content) == "server_busy"
        assert [future.result().status_code for future in running] == [200] * MAX_RUNNING
    assert len(upstream.requests_for(REASONER)) == MAX_RUNNING  # the refused one cost nothing
    after = httpx.post(f"{edge.base_url}/v1/chat/completions", headers=headers, json={"model": "duet", "messages": USER})
    assert after.status_code == 200


# -- surface ------------------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_post_must_be_json(edge: DuetServer, upstream: ScriptedUpstream, content_type: str | None) -> None:
    """What a web page can send cross-site without a preflight never runs a completion."""
    headers = {"Authorization": f"Bearer {API_KEY}", "Origin": "https://evil.example"}
    if content_type:
        headers["Content-Type"] = content_type
    response = httpx.post(f"{edge.base_url}/v1/chat/completions", headers=headers,
                          content=json.dumps({"model": "duet", "messages": USER}))
    assert response.status_code == 415 and error_code(response.content) == "unsupported_media_type"
    assert "access-control-allow-origin" not in response.headers
    assert upstream.requests == []


def test_json_with_a_charset_is_json(edge: DuetServer) -> None:
    response = httpx.post(f"{edge.base_url}/v1/chat/completions", content=json.dumps({"model": "duet", "messages": USER}),
                          headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 200


def test_no_cors_and_no_docs_by_default(edge: DuetServer) -> None:
    preflight = httpx.options(f"{edge.base_url}/v1/chat/completions", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert "access-control-allow-origin" not in preflight.headers
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{edge.base_url}{path}").status_code == 404


def test_cors_and_docs_when_configured(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = DuetServer([], {**pipeline_env(upstream), "DUET_DOCS": "true", "DUET_CORS_ORIGINS": "https://app.example"},
                        tmp_path / "duet.log")
    try:
        request_headers = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
        allowed = httpx.options(f"{server.base_url}/v1/chat/completions", headers={"Origin": "https://app.example", **request_headers})
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.options(f"{server.base_url}/v1/chat/completions", headers={"Origin": "https://evil.example", **request_headers})
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert httpx.get(f"{server.base_url}{path}").status_code == 200
    finally:
        server.stop()


def test_liveness_says_nothing_else(edge: DuetServer) -> None:
    assert httpx.get(f"{edge.base_url}/health").json() == {"status": "ok"}


def test_pipelined_requests_are_answered_in_order(edge: DuetServer) -> None:
    """Requests sent back to back on one connection, before any answer, are answered in the order sent."""
    with socket.create_connection(("127.0.0.1", edge.port)) as sock:
        sock.sendall(b"".join(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode() for path in ("/health", "/health/ready", "/health")))
        answers = read_responses(sock, 3, 5.0)
    assert [(status, json.loads(body)["status"]) for status, _, body in answers] == [(200, "ok"), (200, "ready"), (200, "ok")]


def test_readiness_details_need_a_key(edge: DuetServer) -> None:
    anonymous = httpx.get(f"{edge.base_url}/health/ready")
    assert anonymous.status_code == 200 and anonymous.json() == {"status": "ready"}
    wrong = httpx.get(f"{edge.base_url}/health/ready", headers={"Authorization": "Bearer wrong"})
    assert wrong.json() == {"status": "ready"}
    keyed = httpx.get(f"{edge.base_url}/health/ready", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert keyed["checks"] == {"pipelines": "ok", "mcp_servers": "ok", "state_store": "ok"}
    assert keyed["pipelines"] == ["duet"] and keyed["in_flight"] == 0


def test_degraded_not_unready_while_the_state_store_is_down(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """Every replica shares the store: its outage keeps them in the pool, saying degraded and why."""
    server = DuetServer([], {**pipeline_env(upstream), "DUET_STATE_URL": f"redis://127.0.0.1:{free_port()}/0",
                             "DUET_STORE_TIMEOUT": "0.5"}, tmp_path / "duet.log")
    try:
        anonymous = httpx.get(f"{server.base_url}/health/ready", timeout=5)
        assert anonymous.status_code == 200 and anonymous.json() == {"status": "degraded"}
        keyed = httpx.get(f"{server.base_url}/health/ready", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5)
        assert keyed.status_code == 200 and keyed.json()["checks"]["state_store"] != "ok"
        assert keyed.json()["degraded"] == {"state_store": keyed.json()["checks"]["state_store"]}
    finally:
        server.stop()


def test_not_ready_while_an_upstream_is_unreachable_when_probed(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    env = {**pipeline_env(upstream), "DUET_READY_PROBE_UPSTREAMS": "true", "DUET_STORE_TIMEOUT": "0.5",
           "DUET_ANSWER_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}
    server = DuetServer([], env, tmp_path / "duet.log")
    try:
        keyed = httpx.get(f"{server.base_url}/health/ready", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5)
        assert keyed.status_code == 503
        assert keyed.json()["checks"]["upstreams"][REASONER] == "ok" and keyed.json()["checks"]["upstreams"][ANSWER] != "ok"
    finally:
        server.stop()


def test_a_key_in_the_query_string_stays_out_of_the_request_log(edge: DuetServer) -> None:
    httpx.get(f"{edge.base_url}/v1/models?api_key=sk-query-secret", headers={"Authorization": f"Bearer {API_KEY}", "X-Request-ID": "query-1"})
    deadline = time.monotonic() + 2
    while "[request query-1]" not in edge.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = edge.log.read_text()
    assert "GET /v1/models status=200" in log and "sk-query-secret" not in log


@pytest.mark.parametrize("stream", [False, True])
def test_trailing_slash_routes_answer_directly(edge: DuetServer, stream: bool) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    response = httpx.post(f"{edge.base_url}/v1/chat/completions/", headers=headers, json={"model": "duet", "stream": stream, "messages": USER})
    assert response.status_code == 200 and "echo: " in response.text and '"finish_reason":"stop"' in response.text
    assert httpx.get(f"{edge.base_url}/v1/models/", headers=headers).json()["data"][0]["id"] == "duet"


# -- a client gone before the run starts ----------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_client_gone_before_the_run_starts_never_calls_a_model(edge: DuetServer, upstream: ScriptedUpstream, stream: bool) -> None:
    """The client sends its request and hangs up (a reset) right after its last byte, while the
    server still checks it (a body of many messages takes a while): no model is called for it."""
    messages = [{"role": "user", "content": f"message {i}"} for i in range(1500)]
    body = json.dumps({"model": "duet", "stream": stream, "messages": messages}).encode()
    assert len(body) < MAX_BODY
    for _ in range(10):
        sock = socket.create_connection(("127.0.0.1", edge.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close = reset
        sock.sendall(request_head(edge.port, length=len(body)) + body[:-1])
        time.sleep(0.05)  # the server waits for the last byte: however slow this machine, it cannot start the run yet
        sock.send(body[-1:])  # the body's end and the reset arrive together (back to back on loopback)
        sock.close()
    time.sleep(0.5)  # a window for a run that should not start to reach the upstream: nothing to wait on for an absence
    assert upstream.requests == []
    assert edge.wait_idle()["in_flight"] == 0


# -- bodies being read: not completions, and bounded together -------------------------------------

def test_slow_bodies_do_not_fill_the_completion_cap(edge: DuetServer) -> None:
    """Clients trickling their bodies are not running completions: they cannot lock others out."""
    slow = [socket.create_connection(("127.0.0.1", edge.port)) for _ in range(MAX_RUNNING + 1)]
    try:
        for sock in slow:
            sock.sendall(request_head(edge.port, length=1000) + b'{"model": "duet", ')  # and the rest never comes
        time.sleep(0.1)  # pacing: their heads arrive first (no counter shows a body being read)
        response = httpx.post(f"{edge.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                              json={"model": "duet", "messages": USER}, timeout=5)
        assert response.status_code == 200, response.text
        assert not any(closed_by_server(sock, 0.001) for sock in slow)  # still reading their bodies meanwhile
        assert all(read_response(sock, timeout=TIMEOUT + 5)[0] == 408 for sock in slow)
    finally:
        for sock in slow:
            sock.close()


def test_bodies_in_flight_share_a_byte_budget(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """Bodies being read hold at most max_pending_body_bytes together: beyond it 503 with
    Retry-After; what a body held is given back however its request ends."""
    budget, size = 150_000, 90_000
    server = DuetServer([], {**pipeline_env(upstream), "DUET_MAX_BODY_BYTES": str(MAX_BODY), "DUET_BODY_TIMEOUT": str(TIMEOUT),
                             "DUET_MAX_PENDING_BODY_BYTES": str(budget)}, tmp_path / "duet.log")
    padding = "x" * (size - len(json.dumps({"model": "duet", "messages": [{"role": "user", "content": ""}]})))
    valid = json.dumps({"model": "duet", "messages": [{"role": "user", "content": padding}]}).encode()
    assert len(valid) == size

    def post(body: bytes) -> httpx.Response:
        return httpx.post(f"{server.base_url}/v1/chat/completions", content=body, timeout=10,
                          headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})

    def holding(length: int) -> socket.socket:
        """A client that declares ``length`` bytes of body and sends almost none of them."""
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(request_head(server.port, length=length) + b'{"model":')
        return sock

    def admitted_within(seconds: float) -> httpx.Response:
        """The full-size request, retried while the budget is still held (the server notices a hang-up or timeout)."""
        deadline = time.monotonic() + seconds
        response = post(valid)
        while response.status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.05)
            response = post(valid)
        return response

    try:
        held = holding(size)
        try:
            time.sleep(0.1)  # pacing: the held body is being read first (no counter shows it)
            refused = post(valid)  # with Content-Length: refused before it is read
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert error_code(refused.content) == "server_busy"
            with socket.create_connection(("127.0.0.1", server.port)) as chunked:  # counted as it arrives
                chunked.sendall(request_head(server.port, chunked=True))
                with contextlib.suppress(OSError):
                    for _ in range(10):
                        chunked.sendall(b"%x\r\n%s\r\n" % (10_000, b" " * 10_000))
                status, headers, body = read_response(chunked, timeout=5)
                assert status == 503 and headers["retry-after"] == "1" and error_code(body) == "server_busy"
            small = post(json.dumps({"model": "duet", "messages": USER}).encode())
            assert small.status_code == 200  # what is left of the budget still serves
        finally:
            held.close()  # a hang-up gives its share back
        assert admitted_within(3).status_code == 200
        timed_out = holding(size)  # a body that times out (408) gives its share back
        try:
            assert read_response(timed_out, timeout=TIMEOUT + 5)[0] == 408
        finally:
            timed_out.close()
        assert admitted_within(3).status_code == 200
        assert post(b"{" + b" " * (size - 1)).status_code == 400  # a body that fails to parse gives its share back
        assert post(valid).status_code == 200
        assert upstream.requests_for(REASONER) and all(r.model in (REASONER, ANSWER) for r in upstream.requests)
    finally:
        server.stop()


# -- readiness details --------------------------------------------------------------------------

def test_open_endpoint_shows_readiness_details_only_on_this_machine(env_duet: DuetServer) -> None:
    """With no keys configured, the details are for clients on loopback only; one behind a local
    reverse proxy (which says whom it forwards for) sees the status alone."""
    local = httpx.get(f"{env_duet.base_url}/health/ready", timeout=5).json()
    assert local["checks"]["pipelines"] == "ok" and local["pipelines"] == ["duet-env"]
    forwarded = httpx.get(f"{env_duet.base_url}/health/ready", headers={"X-Forwarded-For": "203.0.113.7"}, timeout=5)
    assert forwarded.status_code == 200 and forwarded.json() == {"status": "ready"}
    forwarded_v6 = httpx.get(f"{env_duet.base_url}/health/ready", headers={"X-Forwarded-For": "2001:db8::7"}, timeout=5)
    assert forwarded_v6.json() == {"status": "ready"}
    assert httpx.get(f"{env_duet.base_url}/health/ready", headers={"X-Forwarded-For": "::1"}, timeout=5).json()["checks"]
