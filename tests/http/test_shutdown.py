"""SIGTERM and SIGINT: stop accepting, let running requests finish for the drain time, end the
rest properly (a stream with one error event and a clean end, others with 503), exit."""

from __future__ import annotations

import concurrent.futures
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, sse_events
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.waiting import eventually, refuses_connections

DRAIN = 2.5  # the short request (0.6 s of reasoning) ends well within it, even on a loaded machine
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def long_thoughts(tag: str) -> Reply:
    return Reply(reasoning=[f"{tag} {i} " for i in range(200)], delay_between=0.1)


def stream(base_url: str, content: str) -> tuple[list[Any], float]:
    """The SSE events of a streamed completion (read to the end), and when it ended."""
    body = {"model": "duet", "stream": True, "messages": [{"role": "user", "content": content}]}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", headers=HEADERS, json=body, timeout=30) as response:
        assert response.status_code == 200
        raw = response.read()  # raises if the connection is cut before the stream's clean end
    return sse_events(raw), time.monotonic()


def collected(base_url: str, content: str) -> httpx.Response:
    body = {"model": "duet", "messages": [{"role": "user", "content": content}]}
    return httpx.post(f"{base_url}/v1/chat/completions", headers=HEADERS, json=body, timeout=30)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_drains_then_ends_what_still_runs(upstream: ScriptedUpstream, tmp_path: Path, sig: signal.Signals) -> None:
    server = DuetServer([], {
        "DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
        "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER,
        "DUET_API_KEYS": API_KEY, "DUET_PING_INTERVAL": "0.2", "DUET_SHUTDOWN_TIMEOUT": str(DRAIN),
    }, tmp_path / "duet.log")
    try:
        def script(body: dict[str, Any]) -> Reply:
            text = str(body["messages"])
            if body["model"] == REASONER and "long" in text:
                return long_thoughts("thinking")
            if body["model"] == REASONER:
                return Reply(reasoning=["brief"], delay=0.6)  # ends within the drain time
            return Reply(content=["done"])

        upstream.set_default(script)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            long_stream = pool.submit(stream, server.base_url, "long stream")
            long_collected = pool.submit(collected, server.base_url, "long collected")
            deadline = time.monotonic() + 5
            while len(upstream.requests_for(REASONER)) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            short_stream = pool.submit(stream, server.base_url, "short")
            while len(upstream.requests_for(REASONER)) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)

            server.process.send_signal(sig)
            signalled = time.monotonic()
            eventually(lambda: refuses_connections(server.port), "the server stops accepting connections", 5)
            with pytest.raises(ConnectionRefusedError):  # no new connections while draining
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()

            events, short_end = short_stream.result(timeout=10)  # finished normally within the drain time
            assert events[-1] == "[DONE]" and not [event for event in events if isinstance(event, dict) and "error" in event]
            assert short_end - signalled < DRAIN + 0.5

            events, long_end = long_stream.result(timeout=10)  # ended after the drain time, properly
            errors = [event for event in events if isinstance(event, dict) and "error" in event]
            assert errors == [events[-1]] and "choices" not in errors[0]
            assert errors[0]["error"]["code"] == "server_shutting_down"
            assert any(event["choices"][0]["delta"].get("reasoning_content") for event in events[:-1])
            assert DRAIN - 0.2 < long_end - signalled < DRAIN + 3

            response = long_collected.result(timeout=10)
            assert response.status_code == 503 and response.json()["error"]["code"] == "server_shutting_down"

        server.process.wait(timeout=DRAIN + 8)
        assert time.monotonic() - signalled < DRAIN + 8
        long_calls = [r for r in upstream.requests_for(REASONER) if "long" in str(r.body["messages"])]
        assert all(call.ended.wait(2) and call.aborted for call in long_calls)  # their model calls were stopped
        assert "Traceback" not in server.log.read_text()
    finally:
        if server.process.poll() is None:
            server.process.kill()
        server.stop()
