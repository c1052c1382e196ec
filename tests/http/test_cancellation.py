"""A client that hangs up stops every model call of its request at once, and leaves nothing behind;
a client gone before a model call starts never costs one, even when the server has not read its
hang-up yet (the server is frozen, or busy, while the client leaves)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import struct
import subprocess
import time
from typing import Iterator

import httpx
import pytest
import yaml

from autogen_core.models import UserMessage

from duet.agents import AnswerSettings, Duet, OpenAICompatibleClient, PipelineSettings, ReasonerSettings
from duet.agents._cancellation import RunToken, child_token, still_wanted
from duet.api.server._server import peer_hung_up
from tests.aborts import PROTOCOLS, protocol_request, read_until
from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from tests.waiting import settle, wait_for

USER = [{"role": "user", "content": "think long"}]
SLOW_THOUGHTS = Reply(reasoning=[f"step {i} " for i in range(40)], delay_between=0.25)


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
    settle(duet, baseline)  # the request and its tasks are over: no model call can start after this
    assert upstream.requests_for(ANSWER) == []  # no answer-model call after the client has gone


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
    settle(duet, baseline)  # the request and its tasks are over: no model call can start after this
    assert upstream.requests_for(ANSWER) == []


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
        assert client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 503  # busy
    assert wait_for(lambda: all(r.ended.is_set() for r in upstream.requests))
    duet.wait_idle()
    log = duet.log.read_text()
    assert log.count("Traceback") == before
    assert "answerer failed in request chatcmpl-" in log and "busy" in log


def hang_up(sock: socket.socket, reset: bool) -> None:
    """Closes ``sock``: with RST if ``reset``, else FIN."""
    if reset:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@contextlib.contextmanager
def frozen(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stops ``process`` (one the tests started, by its PID) for the block: what clients send
    meanwhile waits in its kernel, unread, as it would for a server too busy to read."""
    os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.pid, signal.SIGCONT)


def ended_requests(duet: DuetServer, status: int) -> int:
    """Requests the server has finished with ``status`` (every pipeline and protocol), from /metrics."""
    text = httpx.get(f"{duet.base_url}/metrics", headers=duet.key_header, timeout=5).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("duet_requests_total{") and f'status="{status}"' in line))


@pytest.mark.parametrize("reset", [False, True], ids=["FIN", "RST"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_hang_up_the_server_has_not_read_yet_costs_no_model_call(
    duet: DuetServer, upstream: ScriptedUpstream, protocol: str, reset: bool
) -> None:
    """The client sends its request and leaves while the server is frozen: both reach its kernel
    before the server reads either. A model call would be paid for nobody (a slow reasoner, should
    one be asked, holds its answer back)."""
    # A finished request first: its upstream connection waits in the pool, as on any busy server,
    # so a model call would go out at once.
    answered = httpx.post(f"{duet.base_url}/v1/chat/completions", headers=duet.key_header, timeout=30,
                          json={"model": "answer-only", "messages": [{"role": "user", "content": "hi"}]})
    assert answered.status_code == 200, answered.text
    upstream.reset()
    upstream.script(REASONER, Reply(reasoning=["late"], delay=30))
    gone_before = ended_requests(duet, 499)
    with frozen(duet.process):
        sock = socket.create_connection(("127.0.0.1", duet.port))  # the kernel accepts it for the frozen server
        sock.sendall(protocol_request(protocol, "hi", True, API_KEY))
        hang_up(sock, reset)
    assert wait_for(lambda: ended_requests(duet, 499) > gone_before, 10)  # the server has read it, and given it up
    assert upstream.requests == []
    duet.wait_idle()


@pytest.fixture(scope="module")
def frozen_tool_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """A server whose pipeline has the service tool ``frozen_lookup``, which holds its event loop."""
    directory = tmp_path_factory.mktemp("frozen-tool")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{
        "name": "duet", "reasoner": {"base_url": upstream.base_url, "model": REASONER},
        "answer": {"base_url": upstream.base_url, "model": ANSWER}, "tools": {"functions": ["tests.aborts:frozen_lookup"]},
    }]}))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY}, directory / "duet.log")
    yield server
    server.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_hang_up_during_a_tool_call_starts_no_answer_call(frozen_tool_duet: DuetServer, upstream: ScriptedUpstream,
                                                           protocol: str) -> None:
    """The client leaves on seeing the service tool's call line, while the tool holds the server's
    event loop: the hang-up is read only once the tool has returned, just as the answer agent would
    call its model again with the result."""
    duet = frozen_tool_duet
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("frozen_lookup", '{"query": "x"}')]))
    with socket.create_connection(("127.0.0.1", duet.port)) as sock:
        sock.sendall(protocol_request(protocol, "hi", True, API_KEY))
        sock.settimeout(10)
        seen = b""
        while b"[calling frozen_lookup" not in seen:
            data = sock.recv(65536)
            assert data, seen
            seen += data
    assert duet.wait_idle()["in_flight"] == 0  # the run has ended: nothing more can start
    assert [r.model for r in upstream.requests] == [REASONER, ANSWER]  # no answer call for the tool's result


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_upstream_stream_open_at_a_hang_up_is_closed(duet: DuetServer, upstream: ScriptedUpstream, protocol: str,
                                                        stream: bool) -> None:
    """The reasoner's stream is open when the client leaves (mid-stream, or waiting for a collected
    answer): the upstream sees its connection close, long before its answer would have ended."""
    upstream.script(REASONER, SLOW_THOUGHTS)  # 40 pieces, 0.25 s apart: 10 s
    with socket.create_connection(("127.0.0.1", duet.port)) as sock:
        sock.sendall(protocol_request(protocol, "think long", stream, API_KEY))
        if stream:
            sock.settimeout(10)
            seen, marker = b"", read_until(protocol, "reasoning")
            while marker not in seen:
                data = sock.recv(65536)
                assert data, seen
                seen += data
        else:
            assert wait_for(lambda: upstream.requests_for(REASONER) != [])
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted  # closed by Duet, not ended by the upstream
    assert upstream.requests_for(ANSWER) == []
    duet.wait_idle()


def test_the_kernel_tells_of_a_hang_up_the_server_has_not_read() -> None:
    """FIN and RST are seen without a read; a pipelined request waiting to be read is no hang-up."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        for reset in (False, True):
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
            with server:
                assert not peer_hung_up(server.fileno())
                client.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert wait_for(lambda: server.recv(1, socket.MSG_PEEK) == b"G")
                assert not peer_hung_up(server.fileno())
                hang_up(client, reset)
                assert wait_for(lambda: peer_hung_up(server.fileno()))


def test_a_model_request_whose_caller_has_gone_is_never_written(upstream: ScriptedUpstream) -> None:
    """The model client asks the run's token as the request goes out (the last moment before the
    upstream sees it): a caller found gone cancels the run's token, and nothing is written."""
    gone = [False]
    messages = [UserMessage(content="hi", source="user")]

    async def main() -> None:
        client = OpenAICompatibleClient(ANSWER, upstream.base_url)
        try:
            token = RunToken(caller_gone=lambda: gone[0])
            assert still_wanted(token)
            await client.create(messages, cancellation_token=token)  # goes out; its connection waits in the pool
            gone[0] = True
            with pytest.raises(asyncio.CancelledError):
                await client.create(messages, cancellation_token=child_token(token))  # a call's own token asks the run's
            assert token.is_cancelled() and not still_wanted(token)
        finally:
            await client.close()

    asyncio.run(main())
    assert len(upstream.requests) == 1


def test_a_cancelled_run_makes_no_traceback_to_log(upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling a run cancels every handler of its team; none of them is logged: making a record
    with a traceback (formatted for secret masking) costs 1-2 ms of the event loop, and a few hundred
    streams cancelled at once stalled every other request while the records were dropped."""
    monkeypatch.setenv("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")  # as duet serve runs (api/server/_process.py)
    upstream.script(REASONER, SLOW_THOUGHTS)
    made: list[logging.LogRecord] = []
    make_record = logging.getLogRecordFactory()

    def recording(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        if record.exc_info:
            made.append(record)
        return record

    async def main() -> None:
        settings = PipelineSettings(reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
                                    answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER))
        async with Duet.from_settings(settings) as duet:
            token = RunToken()
            stream = duet.start([{"role": "user", "content": "think long"}], cancellation_token=token)
            for _ in range(3):  # the reasoning streams, and the team has routed the task to the reasoner's turn
                await stream.next_batch()
            token.cancel()  # the client hung up
            await stream.close()

    logging.setLogRecordFactory(recording)
    try:
        asyncio.run(main())
    finally:
        logging.setLogRecordFactory(make_record)
    assert made == [], [record.getMessage() for record in made]
    assert upstream.requests_for(REASONER)[0].ended.wait(5)
