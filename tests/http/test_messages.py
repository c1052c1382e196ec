"""The Anthropic Messages API over real HTTP: the ``anthropic`` SDK against Duet (scripted upstream
as the models), Claude Code's own request shape, hostile input, upstream faults before and after the
first byte, a client that hangs up, ``count_tokens`` and the model aliases."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import anthropic
import httpx
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from tests.waiting import settle, wait_for
from tests.http.test_workers import clean_env, refusal  # noqa: F401 - fixtures of the startup test

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
def client(duet: DuetServer) -> Iterator[anthropic.Anthropic]:
    """The SDK as users set it up: base URL and key (sent as ``x-api-key``); no retries, so a fault shows at once."""
    with anthropic.Anthropic(base_url=duet.base_url, api_key=API_KEY, max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture
def raw(duet: DuetServer) -> Iterator[httpx.Client]:
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=duet.base_url, headers=headers, timeout=30) as http:
        yield http


def named_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The stream's ``event: X`` / ``data: {...}`` blocks, each checked to be framed so."""
    events = []
    for block in body.decode().split("\n\n")[:-1]:
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        events.append((name[len("event: "):], json.loads(data[len("data: "):])))
    return events


def test_create_with_the_sdk_starts_with_thinking(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Greet ", "back."], usage=(11, 3)))
    upstream.script(ANSWER, Reply(content=["Hello ", "there!"], usage=(20, 4)))
    message = client.messages.create(
        model="duet", max_tokens=256, messages=[{"role": "user", "content": "Hi"}],
        system=[{"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
        thinking={"type": "enabled", "budget_tokens": 2048}, metadata={"user_id": "u-1"},
        extra_body={"temperature": 0.5, "top_k": 20},  # the SDK dropped them as arguments; older clients send them
    )
    assert message.type == "message" and message.role == "assistant" and message.model == "duet"
    assert message.id.startswith("msg_")
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Greet back." and thinking.signature
    assert text.type == "text" and text.text == "Hello there!"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (31, 7)
    [answer_call] = upstream.requests_for(ANSWER)
    assert answer_call.body["max_tokens"] == 256 and answer_call.body["temperature"] == 0.5 and answer_call.body["user"] == "u-1"
    assert "top_k" not in answer_call.body and "thinking" not in answer_call.body
    assert answer_call.body["messages"][0]["content"].startswith("Be kind.\n\n")  # the reasoning follows the system prompt


def test_stream_with_the_sdk_accumulates_the_message(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Greet ", "back."], usage=(11, 3)))
    upstream.script(ANSWER, Reply(content=["Hello ", "there!"], usage=(20, 4)))
    texts, kinds = [], []
    with client.messages.stream(model="duet", max_tokens=256, messages=[{"role": "user", "content": "Hi"}]) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "text":
                texts.append(event.text)
        message = stream.get_final_message()
    assert texts == ["Hello ", "there!"]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"thinking", "signature", "content_block_start", "content_block_stop", "message_delta"} <= set(kinds)
    thinking, text = message.content
    assert (thinking.type, thinking.thinking, text.type, text.text) == ("thinking", "Greet back.", "text", "Hello there!")
    assert thinking.signature
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (31, 7)


def test_a_tool_round_trip_with_tool_result(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(content=["Checking."], tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}', pieces=4)]))
    with client.messages.stream(model="duet", max_tokens=512, messages=QUESTION, tools=[WEATHER]) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["thinking", "text", "tool_use"]
    call = first.content[2]
    assert call.name == "get_weather" and call.input == {"city": "Paris"}
    assert upstream.requests_for(ANSWER)[0].body["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "description": WEATHER["description"], "parameters": WEATHER["input_schema"]}}
    ]

    def answer_from_results(body: dict[str, Any]) -> Reply:
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return Reply(content=["Result: ", " / ".join(results)])

    upstream.script(ANSWER, answer_from_results)
    # The SDK's own content blocks go back as they came, thinking (with its signature) included.
    replayed = first.content[0].model_copy(update={"thinking": "A THOUGHT THE CLIENT SENT BACK"})
    history = [*QUESTION, {"role": "assistant", "content": [replayed, *first.content[1:]]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "18°C"}]}]}]
    second = client.messages.create(model="duet", max_tokens=512, messages=history, tools=[WEATHER])
    assert second.stop_reason == "end_turn" and second.content[-1].text == "Result: 18°C"
    sent = upstream.requests_for(ANSWER)[1].body["messages"]
    issued = sent[-2]["tool_calls"][0]["id"]  # the upstream gets back the id it issued (issue 25), not the client's
    assert sent[-2]["role"] == "assistant" and issued.startswith("call_up") and issued != call.id
    assert sent[-1] == {"role": "tool", "tool_call_id": issued, "content": "18°C"}
    assert all("A THOUGHT THE CLIENT SENT BACK" not in json.dumps(r.body) for r in upstream.requests)  # thinking is dropped

    upstream.script(ANSWER, answer_from_results)
    failed = [*history[:2], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "no network", "is_error": True}]}]
    third = client.messages.create(model="duet", max_tokens=512, messages=failed, tools=[WEATHER])
    assert third.content[-1].text == "Result: Error: no network"


@pytest.mark.parametrize(("model", "blocks"), [("duet-think", ["thinking", "text"]), ("duet-hidden", ["text"])])
def test_a_pipelines_reasoning_output_think_is_a_thinking_block_and_hidden_stays_hidden(
    client: anthropic.Anthropic, model: str, blocks: list[str]
) -> None:
    """``think`` puts reasoning inside the answer for clients that read only text; Anthropic's clients
    have thinking blocks for it."""
    created = client.messages.create(model=model, max_tokens=50, messages=[{"role": "user", "content": "Hi"}])
    with client.messages.stream(model=model, max_tokens=50, messages=[{"role": "user", "content": "Hi"}]) as stream:
        streamed = stream.get_final_message()
    for message in (created, streamed):
        assert [block.type for block in message.content] == blocks
        assert message.content[-1].text == "echo: Hi"


def test_parallel_tool_uses_and_disable_parallel_tool_use(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    calls = [ScriptedCall("get_weather", json.dumps({"city": city})) for city in ("Paris", "Rome")]
    upstream.script(ANSWER, Reply(tool_calls=calls, interleave_calls=True))
    message = client.messages.create(model="duet", max_tokens=512, messages=QUESTION, tools=[WEATHER],
                                     tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert [block.input for block in message.content if block.type == "tool_use"] == [{"city": "Paris"}, {"city": "Rome"}]
    body = upstream.requests_for(ANSWER)[0].body
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False


# ---- errors: the SDK's typed exceptions, and no model call that validation could have refused ---


def test_an_unknown_model_is_the_sdks_not_found_error(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.messages.create(model="gpt-nothing", max_tokens=10, messages=QUESTION)
    assert raised.value.status_code == 404
    assert raised.value.body["type"] == "error" and raised.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "gpt-nothing" in raised.value.body["error"]["message"]  # type: ignore[index]
    assert upstream.requests == []


def test_bad_input_is_the_sdks_bad_request_error(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model="duet", max_tokens=10, messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}])
    assert raised.value.body["error"] == {  # type: ignore[index]
        "type": "invalid_request_error", "message": "messages.0.content.0.type: content blocks of type 'video' are not supported here"}
    with pytest.raises(anthropic.BadRequestError):
        client.messages.stream(model="duet", max_tokens=0, messages=QUESTION).__enter__()
    assert upstream.requests == []


def test_a_wrong_key_is_the_sdks_authentication_error(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    with anthropic.Anthropic(base_url=duet.base_url, api_key="wrong", max_retries=0) as sdk:
        with pytest.raises(anthropic.AuthenticationError) as raised:
            sdk.messages.create(model="duet", max_tokens=10, messages=QUESTION)
    assert raised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with anthropic.Anthropic(base_url=duet.base_url, auth_token=API_KEY, max_retries=0) as sdk:  # a bearer token works too
        assert sdk.messages.create(model="duet", max_tokens=10, messages=QUESTION).stop_reason == "end_turn"


HOSTILE = [
    (b"{not json", 400),
    (b'{"model": "duet", "max_tokens": 5, "messages": [{"role": "user", "content": "\\ud800"}]}', 400),
    (b'{"model": "duet", "max_tokens": 5, "messages": ' + b"[" * 200 + b"]" * 200 + b"}", 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}] * 5000}).encode(), 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": []}).encode(), 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": "hi"}).encode(), 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": [{"role": "user"}]}).encode(), 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": QUESTION, "tool_choice": {"type": "sometimes"}}).encode(), 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": QUESTION, "temperature": 7}).encode(), 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": QUESTION, "tools": [{"name": "t", "input_schema": {"type": "string"}}]}).encode(), 400),
    (json.dumps({"model": "duet", "max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": 3}]}]}).encode(), 400),
    (json.dumps([1, 2]).encode(), 400),
]


@pytest.mark.parametrize(("body", "status"), HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_hostile_input_is_refused_in_the_anthropic_shape_without_a_model_call(
    raw: httpx.Client, upstream: ScriptedUpstream, body: bytes, status: int, path: str
) -> None:
    response = raw.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    if status != 200:
        error = response.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error" and error["error"]["message"]
    assert upstream.requests == []


def test_max_tokens_is_required_except_to_count(raw: httpx.Client, upstream: ScriptedUpstream) -> None:
    response = raw.post("/v1/messages", json={"model": "duet", "messages": QUESTION})
    assert response.status_code == 400
    assert response.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}
    assert raw.post("/v1/messages/count_tokens", json={"model": "duet", "messages": QUESTION}).status_code == 200
    assert upstream.requests == []


def test_a_body_that_is_not_json_content_is_a_415_in_the_anthropic_shape(raw: httpx.Client) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = raw.post(path, content=b"model=duet", headers={"content-type": "application/x-www-form-urlencoded"})
        assert response.status_code == 415 and response.json()["error"]["type"] == "invalid_request_error"


def test_an_upstream_fault_before_the_first_byte_is_an_http_status(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(status=429, error_message="slow down", headers={"Retry-After": "30"}))  # beyond what Duet waits out
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(model="duet", max_tokens=10, messages=QUESTION)
    assert limited.value.body["error"]["type"] == "rate_limit_error" and limited.value.response.headers["retry-after"] == "30"  # type: ignore[index]
    upstream.script(REASONER, Reply(status=401, error_message="Duet's upstream key is wrong"))
    with pytest.raises(anthropic.InternalServerError) as failed:
        with client.messages.stream(model="duet", max_tokens=10, messages=QUESTION) as stream:
            stream.get_final_message()
    assert failed.value.status_code == 502 and failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_an_upstream_fault_after_the_first_byte_is_one_error_event(raw: httpx.Client, client: anthropic.Anthropic,
                                                                    upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(content=[f"part {i} " for i in range(10)], fault="disconnect", fault_after=3))
    body = raw.post("/v1/messages", json={"model": "duet", "max_tokens": 50, "stream": True, "messages": QUESTION}).content
    events = named_events(body)
    assert events[0][0] == "message_start"
    assert [name for name, _ in events].count("error") == 1 and events[-1][0] == "error"
    assert events[-1][1] == {"type": "error", "error": {"type": "api_error", "message": events[-1][1]["error"]["message"]}}
    assert "message_stop" not in [name for name, _ in events]

    upstream.script(ANSWER, Reply(content=[f"part {i} " for i in range(10)], fault="disconnect", fault_after=3))
    with pytest.raises(anthropic.APIStatusError) as raised:  # the SDK raises the error event as it reads it
        with client.messages.stream(model="duet", max_tokens=50, messages=QUESTION) as stream:
            stream.get_final_message()
    assert raised.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_a_client_that_hangs_up_mid_stream_stops_the_models(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    baseline = duet.wait_idle()["tasks"]
    upstream.script(REASONER, Reply(reasoning=[f"step {i} " for i in range(40)], delay_between=0.25))
    with httpx.Client(base_url=duet.base_url, headers={"x-api-key": API_KEY}, timeout=30) as http:
        with http.stream("POST", "/messages", json={"model": "duet", "max_tokens": 50, "stream": True, "messages": QUESTION}) as response:
            for line in response.iter_lines():
                if "thinking_delta" in line:
                    break
            hung_up = time.monotonic()
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted
    assert reasoner_call.finished_at - hung_up < 1.0  # type: ignore[operator]
    assert upstream.requests_for(ANSWER) == []
    settle(duet, baseline)


def test_a_quiet_stream_gets_ping_events(raw: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["late"], delay=1.2))  # the test server pings every 0.3 s
    body = raw.post("/v1/messages", json={"model": "duet", "max_tokens": 50, "stream": True, "messages": QUESTION}).content
    names = [name for name, _ in named_events(body)]
    assert names.count("ping") >= 2 and names[-1] == "message_stop"
    assert b'event: ping\ndata: {"type":"ping"}\n\n' in body


# ---- Claude Code's defaults, aliases, count_tokens --------------------------------------------


def claude_code_body(tools: int = 40) -> dict[str, Any]:
    """What Claude Code sends with its defaults (seen on the wire): a long system prompt in blocks with
    cache_control, a system message inside messages, adaptive thinking, context management, output
    config, dozens of tools (some deferred), metadata, streaming."""
    schema = {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}}, "required": ["command"],
              "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}
    return {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "stream": True,
        "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
                   {"type": "text", "text": "Follow the rules. " * 2000, "cache_control": {"type": "ephemeral"}}],
        "messages": [  # in Claude Code's order: the system message follows the first user turn
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>context</system-reminder>"},
                                         {"type": "text", "text": "list the files", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment\nPrimary working directory: /tmp/project"}]},
        ],
        "tools": [{"name": "Bash" if i == 0 else f"mcp__server__tool_{i}", "description": f"Tool {i}. " * 50, "input_schema": schema,
                   **({"defer_loading": True} if i > 20 else {})} for i in range(tools)],
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": "user_abc_account_def_session_123"},
        "temperature": 1,
    }


def test_claude_codes_defaults_work(raw: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("Bash", '{"command": "ls"}')]))
    headers = {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
               "anthropic-version": "2023-06-01", "x-app": "cli", "content-type": "application/json"}
    response = raw.post("/v1/messages?beta=true", content=json.dumps(claude_code_body()), headers=headers)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = named_events(response.content)
    blocks = [data["content_block"]["type"] for name, data in events if name == "content_block_start"]
    assert blocks == ["thinking", "tool_use"]
    assert events[0][1]["message"]["model"] == "claude-sonnet-4-5-20250929"  # the model the client named, reached by an alias
    [delta] = [data for name, data in events if name == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"
    body = upstream.requests_for(ANSWER)[0].body
    assert len(body["tools"]) == 40 and body["max_tokens"] == 32000
    assert [m["role"] for m in body["messages"]] == ["system", "user", "system"]
    assert body["messages"][0]["content"].startswith("You are Claude Code")


def test_a_model_alias_reaches_its_pipeline(client: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    message = client.messages.create(model="claude-haiku-4-5-20251001", max_tokens=20, messages=[{"role": "user", "content": "Hi"}])
    assert message.model == "claude-haiku-4-5-20251001" and message.content[-1].text == "echo: Hi"
    assert upstream.requests_for(ANSWER)


def test_an_alias_naming_no_pipeline_stops_startup(clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    clean_env.setenv("DUET_MODEL_ALIASES", "claude-*=nowhere")
    error = refusal([], capsys)
    assert "model_aliases: 'claude-*' names the pipeline 'nowhere', which is not served" in error


def test_count_tokens_is_an_estimate_without_a_model_call(client: anthropic.Anthropic, raw: httpx.Client,
                                                           upstream: ScriptedUpstream) -> None:
    counted = client.messages.count_tokens(model="duet", messages=[{"role": "user", "content": "What is the weather in Paris today?"}])
    assert counted.input_tokens == 13  # 35 characters / 4, rounded up, + 4 for the message
    with_tools = client.messages.count_tokens(model="claude-sonnet-4-5", system="Be brief.", messages=QUESTION, tools=[WEATHER])
    assert with_tools.input_tokens > counted.input_tokens
    big = claude_code_body()
    big.pop("stream"), big.pop("max_tokens")
    assert raw.post("/v1/messages/count_tokens", json=big).json()["input_tokens"] > 36_000 / 4
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="gpt-nothing", messages=QUESTION)
    assert upstream.requests == []


def test_the_routes_answer_without_v1_too(raw: httpx.Client) -> None:
    response = raw.post("/messages", json={"model": "duet", "max_tokens": 10, "messages": QUESTION})
    assert response.status_code == 200 and response.json()["type"] == "message"
    assert raw.post("/messages/count_tokens", json={"model": "duet", "messages": QUESTION}).json() == {"input_tokens": 9}


def test_shutdown_ends_a_running_stream_with_one_error_event(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """After the drain time a stream still running ends with one Anthropic ``event: error``, and a
    collected request gets 503 with the Anthropic body."""
    drain = 1.0
    server = DuetServer([], {
        "DUET_MODEL_NAME": "duet", "DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
        "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER,
        "DUET_API_KEYS": API_KEY, "DUET_PING_INTERVAL": "0.2", "DUET_SHUTDOWN_TIMEOUT": str(drain),
    }, tmp_path / "duet.log")
    try:
        upstream.set_default(lambda body: Reply(reasoning=[f"step {i} " for i in range(200)], delay_between=0.1))
        headers = {"x-api-key": API_KEY}
        body = {"model": "duet", "max_tokens": 50, "messages": QUESTION}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            streamed = pool.submit(lambda: httpx.post(f"{server.base_url}/v1/messages", headers=headers, json={**body, "stream": True}, timeout=30))
            collected = pool.submit(lambda: httpx.post(f"{server.base_url}/v1/messages", headers=headers, json=body, timeout=30))
            assert wait_for(lambda: len(upstream.requests_for(REASONER)) == 2)
            server.process.send_signal(signal.SIGTERM)
            events = named_events(streamed.result(timeout=15).content)
            response = collected.result(timeout=15)
        assert [name for name, _ in events].count("error") == 1 and events[-1][0] == "error"
        assert events[-1][1]["error"]["type"] == "overloaded_error"
        assert any(name == "content_block_delta" and data["delta"]["type"] == "thinking_delta" for name, data in events)
        assert response.status_code == 503 and response.json()["error"]["type"] == "overloaded_error"
        server.process.wait(timeout=drain + 8)
    finally:
        server.stop()
