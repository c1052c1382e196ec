"""Bad input and failing upstreams: an OpenAI error body with the right status, or one error event."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, sse_events
from tests.scripted_upstream import Reply, ScriptedUpstream

USER = [{"role": "user", "content": "hi"}]


def assert_error(response: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body  # never {"detail": ...}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code, error
    if param is not None:
        assert error["param"] == param, error
    return error


def test_bad_json(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", content=b'{"model": "duet", "messages": [', headers={"content-type": "application/json"})
    assert_error(response, 400, "invalid_json")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER}, "model"),
        ({"model": "duet"}, "messages"),
        ({"model": "duet", "messages": []}, "messages"),
        ({"model": "duet", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "duet", "messages": [{"role": "user", "content": 42}]}, "messages[0].content"),
        ({"model": "duet", "messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type"),
        ({"model": "duet", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"model": "duet", "messages": USER, "tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools.0.function.name"),
        ({"model": "duet", "messages": USER, "temperature": 7}, "temperature"),
        ({"model": "duet", "messages": USER, "n": 3}, "n"),
        ({"model": "duet", "messages": USER, "tools": [{"type": "function", "function": {"name": "a"}}] * 2}, "tools"),
    ],
)
def test_schema_errors_name_the_field(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    assert_error(http.post("/v1/chat/completions", json=body), 400, param=param)


def test_unknown_fields_are_ignored(http: httpx.Client) -> None:
    body = {"model": "duet", "messages": USER, "frobnicate": True, "metadata": {"a": 1}, "store": False}
    assert http.post("/v1/chat/completions", json=body).status_code == 200


def test_authentication(duet: DuetServer) -> None:
    url = f"{duet.base_url}/v1/chat/completions"
    body = {"model": "duet", "messages": USER}
    assert_error(httpx.post(url, json=body), 401, "invalid_api_key")
    assert_error(httpx.post(url, json=body, headers={"Authorization": "Bearer nope"}), 401, "invalid_api_key")
    assert_error(httpx.get(f"{duet.base_url}/v1/models", headers={"Authorization": "Basic x"}), 401)
    assert httpx.post(url, json=body, headers={"Authorization": "Bearer second-key"}).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{duet.base_url}/v1", api_key="wrong", max_retries=0).chat.completions.create(model="duet", messages=USER)


def test_unknown_model(http: httpx.Client) -> None:
    error = assert_error(http.post("/v1/chat/completions", json={"model": "gpt-9", "messages": USER}), 404, "model_not_found", "model")
    assert "gpt-9" in error["message"] and "duet" in error["message"]


def test_unknown_route_and_method(http: httpx.Client) -> None:
    assert_error(http.get("/v1/nothing-here"), 404)
    assert_error(http.get("/v1/chat/completions"), 405)


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_http_error_before_the_first_byte(http: httpx.Client, upstream: ScriptedUpstream, stream: bool) -> None:
    """Duet's own upstream key is wrong: a 502 that says so, never a 401 blaming the client's key."""
    upstream.script(REASONER, Reply(status=401, error_message="Invalid API key for deepseek"))
    response = http.post("/v1/chat/completions", json={"model": "duet", "stream": stream, "messages": USER})
    error = assert_error(response, 502, "upstream_auth")
    assert error["message"] == f"reasoning model {REASONER} answered HTTP 401: Invalid API key for deepseek"
    assert upstream.requests_for(ANSWER) == []


def test_upstream_error_of_the_answer_model(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """A 5xx is retried (twice by default), then passed on as a 502."""
    upstream.script(ANSWER, *[Reply(status=500, error_message="model crashed")] * 3)
    error = assert_error(http.post("/v1/chat/completions", json={"model": "duet", "messages": USER}), 502, "upstream_error")
    assert error["message"] == f"answer model {ANSWER} answered HTTP 500: model crashed"
    assert len(upstream.requests_for(ANSWER)) == 3


def test_unreachable_upstream(duet: DuetServer, upstream: ScriptedUpstream, tmp_path: Any) -> None:
    import yaml

    from tests.conftest import free_port

    config = tmp_path / "dead.yaml"
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config.write_text(yaml.safe_dump({"pipelines": [{"name": "dead", "answer": {"base_url": dead, "model": "x"}}]}))
    server = DuetServer(["--config", str(config)], {}, tmp_path / "dead.log")
    try:
        for stream in (False, True):  # refused before the first byte: the status says it, streamed or not
            response = httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "dead", "stream": stream, "messages": USER})
            message = assert_error(response, 503, "upstream_unavailable")["message"]
            # What to do, as startup says it; the URL tried only in the operator's log (never a client's answer).
            assert message == ("answer model x cannot be reached: connection refused (the URL tried is in the server's log): "
                               "start the server there, or set DUET_ANSWER_BASE_URL (or the pipeline's base_url) to one that "
                               "answers"), message
    finally:
        server.stop()
    assert f"answer model x cannot be reached: connection refused ({dead})" in server.log.read_text()


def test_unreachable_ollama_says_start_it_and_pull_the_models(tmp_path: Any) -> None:
    """The first run without Ollama (the default upstream): the first request says how to start it."""
    import socket

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 11434)) == 0:
            pytest.skip("something listens on Ollama's port here")
    server = DuetServer([], {"DUET_REASONER_MODEL": "r-model", "DUET_ANSWER_MODEL": "a-model"}, tmp_path / "first-run.log")
    try:
        response = httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER})
        message = assert_error(response, 503, "upstream_unavailable")["message"]
        stage, model, variable = ("reasoning", "r-model", "REASONER") if message.startswith("reasoning") else ("answer", "a-model", "ANSWER")
        assert message.startswith(f"{stage} model {model} cannot be reached: "), message
        assert message.endswith("(tried http://localhost:11434/v1, Ollama's default): start Ollama (ollama serve) and pull the models "
                                f"(ollama pull {model}), or set DUET_{variable}_BASE_URL"), message
        assert "ollama serve" in server.log.read_text()  # startup said it too
    finally:
        server.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_timeout(http: httpx.Client, upstream: ScriptedUpstream, stream: bool) -> None:
    """``duet-impatient`` allows its answer model 1 s of silence."""
    upstream.script("qwen-slow", Reply(content=["never"], fault="stall"))
    response = http.post("/v1/chat/completions", json={"model": "duet-impatient", "stream": stream, "messages": USER})
    if not stream:
        assert "silent" in assert_error(response, 504, "upstream_timeout")["message"]
        return
    # The reasoning already streamed, so the status line was sent: the timeout arrives as one error event.
    assert response.status_code == 200
    events = sse_events(response.content)
    assert "[DONE]" not in events
    *chunks, error = events
    assert set(error) == {"error"} and error["error"]["code"] == "upstream_timeout"
    assert all("choices" in chunk for chunk in chunks)
    assert not any(c["choices"] and c["choices"][0]["finish_reason"] for c in chunks)


@pytest.mark.parametrize("fault", ["disconnect", "error_event", "garbage"])
def test_mid_stream_upstream_failure_is_one_error_event(http: httpx.Client, upstream: ScriptedUpstream, fault: str) -> None:
    upstream.script(ANSWER, Reply(content=["half ", "an ", "answer"], fault=fault, fault_after=3, error_message="overloaded"))
    with http.stream("POST", "/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}) as response:
        assert response.status_code == 200
        raw = response.read()
    events = sse_events(raw)
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1 and events[-1] is errors[0]
    assert "choices" not in errors[0] and errors[0]["error"]["type"] == "upstream_error"
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in events[:-1] if c["choices"])
    assert content == "half an "  # what arrived before the failure is kept


def test_openai_sdk_raises_on_the_error_event(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(content=["x"], fault="disconnect", fault_after=2))
    client = openai.OpenAI(base_url=f"{duet.base_url}/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.APIError, match=r"broke off the stream|ended the stream"):
        for _ in client.chat.completions.create(model="duet", messages=USER, stream=True):
            pass


def test_server_stays_healthy_after_failures(duet: DuetServer, http: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(status=500))
    http.post("/v1/chat/completions", json={"model": "duet", "messages": USER})
    assert http.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 200
    assert duet.wait_idle()["in_flight"] == 0


def test_stock_client_pipeline_maps_upstream_errors(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """A pipeline on AutoGen's OpenAIChatCompletionClient: the openai SDK's errors get the same statuses."""
    upstream.script(REASONER, Reply(status=401, error_message="bad upstream key"))
    error = assert_error(http.post("/v1/chat/completions", json={"model": "duet-stock-client", "messages": USER}), 502, "upstream_auth")
    assert error["message"] == f"reasoning model {REASONER} answered HTTP 401: bad upstream key"


def test_bad_requests_are_not_logged_as_crashes(http: httpx.Client, duet: DuetServer) -> None:
    assert_error(http.post("/v1/chat/completions", json={"model": "duet", "messages": [{"role": "wizard"}]}), 400)
    assert_error(http.post("/v1/chat/completions", json={"model": "duet", "messages": [{"role": "user", "content": 1}]}), 400)
    assert "Exception in ASGI application" not in duet.log.read_text()


def test_a_dropped_upstream_connection_is_tried_once_more(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """A keep-alive connection the upstream closed as Duet reused it: retried on a fresh connection."""
    upstream.script(ANSWER, Reply(drop_connection=True), Reply(content=["fine"]))
    response = http.post("/v1/chat/completions", json={"model": "duet", "messages": USER})
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "fine"
    assert len(upstream.requests_for(ANSWER)) == 2
