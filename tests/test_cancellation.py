"""A client that hangs up stops every model call of its request at once, and leaves nothing behind."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.scripted_upstream import Reply, ScriptedUpstream

USER = [{"role": "user", "content": "think long"}]
SLOW_THOUGHTS = Reply(reasoning=[f"step {i} " for i in range(40)], delay_between=0.25)


def wait_for(condition, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def settle(duet: DuetServer, baseline_tasks: int) -> None:
    """No request in flight and no task left over (a little slack for the server's own housekeeping)."""
    assert wait_for(lambda: duet.health()["in_flight"] == 0), duet.health()
    assert wait_for(lambda: duet.health()["tasks"] <= baseline_tasks + 1), (duet.health(), baseline_tasks)


def test_disconnect_while_reasoning_streams(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    baseline = duet.wait_idle()["tasks"]
    upstream.script(REASONER, SLOW_THOUGHTS)
    with httpx.Client(base_url=duet.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
        with client.stream("POST", "/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}) as response:
            for line in response.iter_lines():
                if "reasoning_content" in line:
                    break
            hung_up = time.monotonic()
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted
    assert reasoner_call.finished_at - hung_up < 1.0  # "at once": well before the next reasoning piece was due
    time.sleep(0.5)
    assert upstream.requests_for(ANSWER) == []  # no answer-model call after the client has gone
    settle(duet, baseline)


def test_disconnect_during_a_silent_start(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """Before the first token (a model still loading) nothing is written but pings; a hang-up
    still reaches the upstream call at once."""
    baseline = duet.wait_idle()["tasks"]
    upstream.script(REASONER, Reply(reasoning=["late"], delay=30))
    body = b'{"model": "duet", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", duet.port)) as sock:
        sock.sendall(request)
        sock.settimeout(5)
        head = sock.recv(4096)  # status line and pings arrive after one ping interval
        assert head.startswith(b"HTTP/1.1 200")
        assert wait_for(lambda: upstream.requests_for(REASONER) != [])
    hung_up = time.monotonic()
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted
    assert reasoner_call.finished_at - hung_up < 1.0
    settle(duet, baseline)


def test_disconnect_while_the_answer_streams(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    baseline = duet.wait_idle()["tasks"]
    upstream.script(ANSWER, Reply(content=[f"word{i} " for i in range(40)], delay_between=0.25))
    with httpx.Client(base_url=duet.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
        with client.stream("POST", "/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}) as response:
            for line in response.iter_lines():
                if '"content":"word' in line:
                    break
    answer_call = upstream.requests_for(ANSWER)[0]
    assert answer_call.ended.wait(5) and answer_call.aborted
    settle(duet, baseline)


def test_non_streaming_client_that_gives_up(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    baseline = duet.wait_idle()["tasks"]
    upstream.script(REASONER, SLOW_THOUGHTS)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{duet.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER},
                   headers={"Authorization": f"Bearer {API_KEY}"}, timeout=0.6)
    hung_up = time.monotonic()
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted
    assert reasoner_call.finished_at - hung_up < 1.0
    time.sleep(0.3)
    assert upstream.requests_for(ANSWER) == []
    settle(duet, baseline)


def test_repeated_hang_ups_leave_no_connections_behind(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    baseline = duet.wait_idle()["tasks"]
    for _ in range(5):
        upstream.script(REASONER, SLOW_THOUGHTS)
        with httpx.Client(base_url=duet.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
            with client.stream("POST", "/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}) as response:
                next(line for line in response.iter_lines() if "reasoning_content" in line)
    assert wait_for(lambda: all(r.ended.is_set() for r in upstream.requests))
    assert all(r.aborted for r in upstream.requests_for(REASONER))
    settle(duet, baseline)
    # Aborted upstream connections are closed, not parked in the pool.
    assert wait_for(lambda: upstream.open_connections <= 3), upstream.open_connections


def test_hang_ups_and_upstream_failures_are_not_logged_as_crashes(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """A hang-up is the service working; an upstream failure is one warning line. Neither is a traceback."""
    before = duet.log.read_text().count("Traceback")
    upstream.script(REASONER, SLOW_THOUGHTS)
    with httpx.Client(base_url=duet.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
        with client.stream("POST", "/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}) as response:
            next(line for line in response.iter_lines() if "reasoning_content" in line)
        upstream.script(ANSWER, *[Reply(status=503, error_message="busy")] * 3)  # the first try and two retries
        assert client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 502
    assert wait_for(lambda: all(r.ended.is_set() for r in upstream.requests))
    duet.wait_idle()
    log = duet.log.read_text()
    assert log.count("Traceback") == before
    assert "answerer failed in request chatcmpl-" in log and "busy" in log
