"""Upstream faults keep their meaning: a matrix of faults × stage × stream/non-stream over real HTTP.

Each fault is scripted into the scripted upstream for one stage's model (the reasoning model or
the answer model); the client gets the mapped status and an OpenAI error body before the stream
starts, or one error event as the last thing of a stream that already started. The upstream's
request log says how many calls were made (retries). Timeouts are 1 s so hangs cost little.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

from tests.conftest import DuetServer, free_port, sse_events
from tests.scripted_upstream import Reply, ScriptedUpstream

REASONER, ANSWER = "fx-r1", "fx-answer"
KEY = "fx-client-key-0001"
UPSTREAM_KEY = "sk-fx-upstream-secret-0123"
ORG_HEADER = "org-header-secret-4567"
USER = [{"role": "user", "content": "hi"}]


def fault_config(upstream_url: str) -> dict[str, Any]:
    quick = {"base_url": upstream_url, "read_timeout": 1.0, "retry_backoff": 0.01, "max_retry_wait": 2.0}
    # The reasoner as it failed before issue 26 (the request fails; its calls retried): what this matrix checks.
    reasoner = {**quick, "model": REASONER, "on_failure": "fail", "max_retries": 2}
    answer = {**quick, "model": ANSWER, "api_key_env": "FX_UPSTREAM_KEY", "headers": {"X-Org": ORG_HEADER}}
    dead = {**quick, "base_url": f"http://127.0.0.1:{free_port()}/v1", "connect_timeout": 1.0}
    stock = {"client": "openai", "max_retries": 0}
    return {
        "ping_interval": 3.0,  # longer than a hang: a failure before the first token still gets its status
        "pipelines": [
            {"name": "fx", "reasoner": reasoner, "answer": answer},
            {"name": "fx-stock", "reasoner": {**reasoner, **stock}, "answer": {**answer, **stock}},
            {"name": "fx-dead-reasoner", "reasoner": {**dead, "model": REASONER, "on_failure": "fail"}, "answer": answer},
            {"name": "fx-dead-answer", "reasoner": reasoner, "answer": {**dead, "model": ANSWER}},
            {"name": "fx-stock-dead-answer", "reasoner": reasoner, "answer": {**dead, **stock, "model": ANSWER}},
            {"name": "fx-answer-only", "answer": {**answer, "max_retries": 2}},
        ],
    }


@pytest.fixture(scope="module")
def fx(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory = tmp_path_factory.mktemp("faults")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump(fault_config(upstream.base_url)))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": KEY, "FX_UPSTREAM_KEY": UPSTREAM_KEY}, directory / "duet.log")
    yield server
    server.stop()


@pytest.fixture
def client(fx: DuetServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fx.base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as http:
        yield http


@dataclass
class Fault:
    """A fault, and what the client must see: ``status`` and ``code`` (before the stream starts;
    afterwards the same body as an error event), how many calls the failing model got."""

    reply: dict[str, Any]
    status: int
    code: str
    type: str = "upstream_error"
    param: str | None = None
    calls: int = 1
    retry_after: str | None = None
    mid_stream: bool = False  # the stage sent part of its answer before the fault
    message: str = ""  # a part of the message
    extra: dict[str, Any] = field(default_factory=dict)


FAULTS = {
    "400 context_length_exceeded": Fault(
        {"status": 400, "error_code": "context_length_exceeded", "error_type": "invalid_request_error", "error_param": "messages",
         "error_message": "This model's maximum context length is 8192 tokens"},
        400, "context_length_exceeded", type="invalid_request_error", param="messages", message="answered HTTP 400: This model's maximum",
    ),
    "404": Fault({"status": 404, "error_message": "no such model"}, 502, "upstream_model_not_found"),
    "413": Fault({"status": 413, "error_message": "too large"}, 400, "upstream_invalid_request", type="scripted"),
    "422": Fault({"status": 422, "error_message": "unprocessable"}, 400, "upstream_invalid_request", type="scripted"),
    "429 Retry-After beyond the bound": Fault(
        {"status": 429, "error_message": "slow down", "error_type": "requests", "headers": {"Retry-After": "30"}},
        429, "rate_limit_exceeded", type="requests", retry_after="30", message="answered HTTP 429: slow down",
    ),
    "401": Fault({"status": 401, "error_message": "Incorrect API key"}, 502, "upstream_auth", message="answered HTTP 401"),
    "403": Fault({"status": 403, "error_message": "forbidden"}, 502, "upstream_auth"),
    "500": Fault({"status": 500, "error_message": "crashed"}, 502, "upstream_error", calls=3, message="answered HTTP 500: crashed"),
    "503": Fault({"status": 503, "error_message": "overloaded"}, 503, "upstream_overloaded", calls=3),
    "hang before headers": Fault({"delay": 30}, 504, "upstream_timeout", message="did not answer within 1s"),
    "hang mid-stream": Fault({"fault": "stall", "fault_after": 2}, 504, "upstream_timeout", mid_stream=True, message="went silent"),
    "drop mid-stream": Fault({"fault": "disconnect", "fault_after": 2}, 502, "upstream_disconnected", mid_stream=True,
                             message="broke off the stream"),
    "garbage chunk": Fault({"fault": "garbage", "fault_after": 2}, 502, "upstream_protocol_error", mid_stream=True,
                           message="not JSON"),
    "error event": Fault({"fault": "error_event", "fault_after": 2, "error_message": "engine died"}, 502, "upstream_error",
                         mid_stream=True, message="failed mid-stream: engine died"),
    "HTML 200": Fault({"body": "html"}, 502, "upstream_protocol_error", message="an HTML page"),
    "JSON error object 200": Fault(
        {"body": "error_object", "error_code": 400, "error_type": "BadRequestError", "error_message": "bad messages"},
        400, "upstream_invalid_request", type="BadRequestError", message="bad messages",
    ),
    "only [DONE]": Fault({"body": "only_done"}, 502, "upstream_protocol_error", message="without an answer"),
}

STAGES = {"reasoner": (REASONER, "reasoning model"), "answer": (ANSWER, "answer model")}


def scripted(stage: str, fault: Fault) -> Reply:
    text = {"reasoning": ["Thinking ", "hard ", "now."]} if stage == "reasoner" else {"content": ["half ", "an ", "answer"]}
    return Reply(**text, **fault.reply)


def check_body(error: dict[str, Any], fault: Fault, stage: str) -> None:
    model, stage_name = STAGES[stage]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["code"] == fault.code and error["type"] == fault.type and error["param"] == fault.param, error
    assert error["message"].startswith(f"{stage_name} {model} "), error
    assert fault.message in error["message"], error
    assert "127.0.0.1" not in error["message"] and "http" not in error["message"], error  # no internal URL


def check_calls(upstream: ScriptedUpstream, stage: str, calls: int) -> None:
    model = STAGES[stage][0]
    assert len(upstream.requests_for(model)) == calls, [r.model for r in upstream.requests]
    if stage == "reasoner":
        assert upstream.requests_for(ANSWER) == []  # nothing paid for after the reasoner failed
    else:
        assert len(upstream.requests_for(REASONER)) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_matrix(client: httpx.Client, upstream: ScriptedUpstream, name: str, stage: str, stream: bool) -> None:
    fault = FAULTS[name]
    upstream.script(STAGES[stage][0], *[scripted(stage, fault)] * fault.calls)
    response = client.post("/v1/chat/completions", json={"model": "fx", "stream": stream, "messages": USER})
    started = stream and (stage == "answer" or fault.mid_stream)  # something was streamed before the fault
    if not started:
        assert response.status_code == fault.status, response.text
        assert response.headers.get("retry-after") == fault.retry_after
        assert response.headers["content-type"].startswith("application/json")
        body = response.json()
        assert set(body) == {"error"}, body
        check_body(body["error"], fault, stage)
    else:
        assert response.status_code == 200
        events = sse_events(response.content)
        *chunks, last = events
        assert set(last) == {"error"}, events[-3:]  # the error event is the last thing, no [DONE] after it
        check_body(last["error"], fault, stage)
        assert all("choices" in chunk and "error" not in chunk for chunk in chunks)
        assert not any(c["choices"] and c["choices"][0]["finish_reason"] for c in chunks)  # never a finish before an error
        if fault.mid_stream:  # what arrived before the fault is kept
            delta = "reasoning_content" if stage == "reasoner" else "content"
            streamed = "".join(c["choices"][0]["delta"].get(delta) or "" for c in chunks if c["choices"])
            assert streamed.startswith("Thinking " if stage == "reasoner" else "half "), streamed
    check_calls(upstream, stage, fault.calls)


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_connect_refused(client: httpx.Client, upstream: ScriptedUpstream, stage: str, stream: bool) -> None:
    """No connection: retried, then 503 (or the error event of a stream that started)."""
    response = client.post("/v1/chat/completions", json={"model": f"fx-dead-{stage}", "stream": stream, "messages": USER})
    fault = Fault({}, 503, "upstream_unavailable", message="cannot be reached: connection refused")
    if stream and stage == "answer":
        assert response.status_code == 200
        check_body(sse_events(response.content)[-1]["error"], fault, stage)
    else:
        assert response.status_code == 503, response.text
        check_body(response.json()["error"], fault, stage)


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_plain_json_completion_is_used(client: httpx.Client, upstream: ScriptedUpstream, stage: str, stream: bool) -> None:
    """An upstream that ignores ``stream: true`` and answers one chat.completion: its answer is used."""
    if stage == "reasoner":
        upstream.script(REASONER, Reply(reasoning=["Plain ", "thoughts."], body="completion"))
    else:
        upstream.script(ANSWER, Reply(content=["Plain ", "answer."], body="completion", usage=(11, 7)))
    response = client.post("/v1/chat/completions",
                           json={"model": "fx", "stream": stream, "messages": USER, "stream_options": {"include_usage": True}})
    assert response.status_code == 200, response.text
    if stream:
        chunks = [e for e in sse_events(response.content) if e != "[DONE]"]
        reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c["choices"])
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        usage = chunks[-1]["usage"]
    else:
        message = response.json()["choices"][0]["message"]
        reasoning, content, usage = message.get("reasoning_content") or "", message["content"], response.json()["usage"]
    if stage == "reasoner":
        assert reasoning == "Plain thoughts." and content.startswith("echo: ")
    else:
        assert reasoning == "Thinking about it." and content == "Plain answer."
        assert usage["completion_tokens"] >= 7


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_a_body_that_never_ends_after_done_costs_no_wait(client: httpx.Client, upstream: ScriptedUpstream, stage: str, stream: bool) -> None:
    """An upstream that sends ``[DONE]`` and then never ends its body: the answer is complete at
    ``[DONE]``; the client waits a moment for the body's end (to reuse the connection), not for the
    read timeout (1 s here), and the next request gets a connection that works."""
    model, reply = (REASONER, Reply(reasoning=["Done ", "thinking."], fault="stall_after_done")) if stage == "reasoner" else (
        ANSWER, Reply(content=["Done ", "answering."], fault="stall_after_done"))
    upstream.script(model, reply)
    started = time.monotonic()
    response = client.post("/v1/chat/completions", json={"model": "fx", "stream": stream, "messages": USER})
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    if stream:
        chunks = [e for e in sse_events(response.content) if e != "[DONE]"]
        assert not any("error" in c for c in chunks), chunks
        text = "".join((c["choices"][0]["delta"].get("reasoning_content") or c["choices"][0]["delta"].get("content") or "")
                       for c in chunks if c["choices"])
    else:
        message = response.json()["choices"][0]["message"]
        text = (message.get("reasoning_content") or "") + (message["content"] or "")
    assert ("Done thinking." if stage == "reasoner" else "Done answering.") in text
    assert elapsed < 0.8, elapsed
    again = client.post("/v1/chat/completions", json={"model": "fx", "messages": USER})
    assert again.status_code == 200, again.text


def test_plain_json_completion_with_tool_calls(client: httpx.Client, upstream: ScriptedUpstream) -> None:
    from tests.conftest import tool
    from tests.scripted_upstream import ScriptedCall

    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("lookup", '{"query": "x"}')], body="completion"))
    response = client.post("/v1/chat/completions", json={"model": "fx", "messages": USER, "tools": [tool("lookup")]})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == [("lookup", '{"query": "x"}')]


# -- retries ---------------------------------------------------------------------------------------
def test_retry_after_within_the_bound_is_waited_out(client: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(status=429, headers={"Retry-After": "1"}), Reply(content=["fine"]))
    started = time.monotonic()
    response = client.post("/v1/chat/completions", json={"model": "fx-answer-only", "messages": USER})
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "fine"
    assert time.monotonic() - started >= 0.95
    calls = upstream.requests_for(ANSWER)
    assert len(calls) == 2 and calls[1].received_at - calls[0].received_at >= 0.95


def test_server_errors_are_retried_with_backoff(client: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(status=503), Reply(status=500), Reply(content=["third time"]))
    response = client.post("/v1/chat/completions", json={"model": "fx-answer-only", "stream": True, "messages": USER})
    assert response.status_code == 200
    assert "third time" in response.text and "error" not in response.text
    assert len(upstream.requests_for(ANSWER)) == 3


def test_client_errors_are_not_retried(client: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(status=400, error_message="no"), Reply(content=["never asked"]))
    assert client.post("/v1/chat/completions", json={"model": "fx-answer-only", "messages": USER}).status_code == 400
    assert len(upstream.requests_for(ANSWER)) == 1


def test_the_retry_after_a_closed_pooled_connection_uses_a_new_connection(client: httpx.Client, upstream: ScriptedUpstream) -> None:
    """The upstream closes keep-alive connections as Duet reuses them (a restart, an idle timeout):
    the retry must not take the next pooled connection, which is as dead."""
    import concurrent.futures

    upstream.script(ANSWER, *[Reply(content=["warm"], delay=0.3)] * 4)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # four connections in the pool
        list(pool.map(lambda _: client.post("/v1/chat/completions", json={"model": "fx-answer-only", "messages": USER}), range(4)))
    pooled = {r.peer_port for r in upstream.requests}
    upstream.requests.clear()
    upstream.script(ANSWER, Reply(drop_connection=True), Reply(content=["fresh"]))
    response = client.post("/v1/chat/completions", json={"model": "fx-answer-only", "messages": USER})
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "fresh"
    first, retry = upstream.requests_for(ANSWER)
    assert first.peer_port in pooled and retry.peer_port not in pooled


# -- AutoGen's stock client ------------------------------------------------------------------------
STOCK_FAULTS = ["400 context_length_exceeded", "404", "413", "422", "429 Retry-After beyond the bound", "401", "403", "500", "503",
                "hang before headers"]


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("name", STOCK_FAULTS)
def test_stock_client_maps_the_same(client: httpx.Client, upstream: ScriptedUpstream, name: str, stream: bool) -> None:
    """``client: openai`` (the openai SDK's exceptions): the same statuses, codes and Retry-After."""
    fault = FAULTS[name]
    upstream.script(REASONER, scripted("reasoner", fault))
    response = client.post("/v1/chat/completions", json={"model": "fx-stock", "stream": stream, "messages": USER})
    assert response.status_code == fault.status, response.text
    assert response.headers.get("retry-after") == fault.retry_after
    error = response.json()["error"]
    assert error["code"] == fault.code and error["message"].startswith(f"reasoning model {REASONER} "), error
    assert len(upstream.requests_for(REASONER)) == 1  # max_retries: 0


def test_stock_client_connect_refused(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json={"model": "fx-stock-dead-answer", "messages": USER})
    assert response.status_code == 503 and response.json()["error"]["code"] == "upstream_unavailable", response.text


# -- secrets ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["fx", "fx-stock"])
@pytest.mark.parametrize("status", [400, 401, 500])
def test_an_echoed_key_is_masked_in_the_body_and_the_log(
    client: httpx.Client, fx: DuetServer, upstream: ScriptedUpstream, model: str, status: int
) -> None:
    upstream.script(ANSWER, *[Reply(status=status, echo_key=True, error_message=f"bad key {ORG_HEADER}")] * 3)
    response = client.post(f"/v1/chat/completions?api_key={KEY}", json={"model": model, "messages": USER})
    assert upstream.requests_for(ANSWER)[0].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"  # it was sent, and echoed
    assert response.status_code in (400, 502)
    message = response.json()["error"]["message"]
    assert "you sent: Bearer ***" in message and "bad key ***" in message, message
    fx.wait_idle()
    log = fx.log.read_text()
    assert "answerer failed in request" in log
    for secret in (UPSTREAM_KEY, ORG_HEADER, KEY):
        assert secret not in response.text and secret not in log


# -- readiness -------------------------------------------------------------------------------------
def test_check_ready(upstream: ScriptedUpstream) -> None:
    import asyncio

    from duet.agents import OpenAICompatibleClient, UpstreamStatusError, UpstreamTimeout, UpstreamUnreachable

    async def probe(base_url: str, timeout: float = 2.0) -> BaseException | None:
        client = OpenAICompatibleClient(ANSWER, base_url, api_key=UPSTREAM_KEY)
        try:
            await client.check_ready(timeout)
            return None
        except Exception as exc:  # noqa: BLE001 - the probe's answer
            return exc
        finally:
            await client.close()

    assert asyncio.run(probe(upstream.base_url)) is None
    assert upstream.requests == []  # a GET of /models, not a completion
    upstream.models_reply = Reply(status=401, echo_key=True, error_message="bad key")
    failure = asyncio.run(probe(upstream.base_url))
    assert isinstance(failure, UpstreamStatusError) and failure.upstream_status == 401
    assert str(failure) == f"model {ANSWER} answered HTTP 401: bad key (you sent: Bearer ***)"  # masked
    upstream.models_reply = Reply(delay=5)
    assert isinstance(asyncio.run(probe(upstream.base_url, timeout=0.3)), UpstreamTimeout)
    assert isinstance(asyncio.run(probe(f"http://127.0.0.1:{free_port()}/v1")), UpstreamUnreachable)


def test_log_has_no_tracebacks_for_upstream_faults(fx: DuetServer) -> None:
    """Every fault above is an expected event: one warning line each, never a traceback."""
    fx.wait_idle()
    assert "Traceback" not in Path(fx.log).read_text()
