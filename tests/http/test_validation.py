"""The client's mistakes are refused with a 400 naming the param, before any model runs.

Each case goes over real HTTP to ``duet serve``; the scripted upstream records every request it
gets, so "no model ran" is checked, not assumed. Each case is sent streamed and not: validation
happens before the status line either way.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import DuetServer, tool
from tests.scripted_upstream import ScriptedUpstream, users_words
from tests.http.test_errors import assert_error

USER = [{"role": "user", "content": "hi"}]
DEEP = 2000  # far past Python's recursion limit of 1,000


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "duet", "messages": USER, **fields}


def nested(depth: int) -> str:
    """JSON text of arrays and objects ``depth`` levels deep (deeper than ``json.dumps`` can write)."""
    opening = "".join('{"a":' if level % 2 else "[" for level in range(depth))
    closing = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return opening + '"leaf"' + closing


def with_deep(payload: dict[str, Any], depth: int) -> bytes:
    """``payload`` as JSON, its ``"DEEP"`` value replaced by :func:`nested` text."""
    return json.dumps(payload).replace('"DEEP"', nested(depth)).encode()


def assistant_calls(*calls: Any) -> list[dict[str, Any]]:
    return [*USER, {"role": "assistant", "content": None, "tool_calls": list(calls)}, {"role": "tool", "tool_call_id": "c1", "content": "r"}]


CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
SURROGATE = "bad \ud800 text"

# (case id, the body as sent, the param named, the code)
CASES: list[tuple[str, bytes | dict[str, Any], str | None, str]] = [
    # numbers
    ("nan in logit_bias", b'{"model":"duet","messages":[{"role":"user","content":"hi"}],"logit_bias":{"50256":NaN}}', None, "invalid_json"),
    ("infinity temperature", b'{"model":"duet","messages":[{"role":"user","content":"hi"}],"temperature":Infinity}', None, "invalid_json"),
    ("overflowing float", b'{"model":"duet","messages":[{"role":"user","content":"hi"}],"top_p":1e999}', None, "invalid_json"),
    ("-infinity inside a tool schema", b'{"model":"duet","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",'
     b'"function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"number","minimum":-Infinity}}}}}]}', None, "invalid_json"),
    ("logit_bias above 100", body(logit_bias={"50256": 101}), "logit_bias.50256", "invalid_request"),
    ("logit_bias key not a token id", body(logit_bias={"hello": 1}), "logit_bias.hello", "invalid_request"),
    ("max_tokens 10**30", body(max_tokens=10**30), "max_tokens", "invalid_request"),
    ("max_completion_tokens 2**63", body(max_completion_tokens=2**63), "max_completion_tokens", "invalid_request"),
    ("max_tokens 2**31 (OpenAI's int32)", body(max_tokens=2**31), "max_tokens", "invalid_request"),
    ("max_completion_tokens 2**31", body(max_completion_tokens=2**31), "max_completion_tokens", "invalid_request"),
    ("seed 2**64", body(seed=2**64), "seed", "invalid_request"),
    # counts and shapes
    ("five stop strings", body(stop=["a", "b", "c", "d", "e"]), "stop", "invalid_request"),
    ("stop a number", body(stop=5), "stop", "invalid_request"),
    ("response_format bogus", body(response_format={"type": "bogus"}), "response_format.type", "invalid_request"),
    ("response_format json_schema without schema", body(response_format={"type": "json_schema"}), "response_format", "invalid_request"),
    ("response_format json_schema bad name", body(response_format={"type": "json_schema", "json_schema": {"name": "a b"}}),
     "response_format.json_schema.name", "invalid_request"),
    ("tool parameters a string schema", body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]),
     "tools.0.function.parameters", "invalid_request"),
    ("tool parameters a list", body(tools=[{"type": "function", "function": {"name": "f", "parameters": [1, 2]}}]),
     "tools.0.function.parameters", "invalid_request"),
    ("tool parameters required not a list", body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "x"}}}]),
     "tools.0.function.parameters", "invalid_request"),
    ("tool property not a schema", body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": 5}}}}]),
     "tools.0.function.parameters", "invalid_request"),
    ("functions with tool_choice required", body(functions=[tool("f")["function"]], tool_choice="required"), "tool_choice", None),
    ("tool type not function", body(tools=[{"type": "retrieval", "function": {"name": "f"}}]), "tools.0.type", "invalid_request"),
    ("129 tools", body(tools=[tool(f"t{i}") for i in range(129)]), "tools", "too_many_items"),
    ("129 functions", body(functions=[tool(f"t{i}")["function"] for i in range(129)]), "functions", "too_many_items"),
    ("4097 messages", body(messages=USER * 4097), "messages", "too_many_items"),
    ("tool_choice required without tools", body(tool_choice="required"), "tool_choice", None),
    ("tool_choice names a tool without tools", body(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice", None),
    ("function_call names a function without functions", body(function_call={"name": "f"}), "function_call", None),
    ("model name too long", {"model": "m" * 300, "messages": USER}, "model", "invalid_request"),
    # tool calls in the history
    ("tool_calls not a list", body(messages=[*USER, {"role": "assistant", "tool_calls": {"id": "c1"}}]), "messages[1].tool_calls", "invalid_message"),
    ("tool call id a number", body(messages=assistant_calls({**CALL, "id": 7})), "messages[1].tool_calls[0].id", "invalid_message"),
    ("tool call type bogus", body(messages=assistant_calls({**CALL, "type": "bogus"})), "messages[1].tool_calls[0].type", "invalid_message"),
    ("tool call ids repeated", body(messages=assistant_calls(CALL, CALL)), "messages[1].tool_calls[1].id", "invalid_message"),
    ("tool call arguments a number", body(messages=assistant_calls({**CALL, "function": {"name": "lookup", "arguments": 5}})),
     "messages[1].tool_calls[0].function.arguments", "invalid_message"),
    ("tool call without a name", body(messages=assistant_calls({**CALL, "function": {"name": "", "arguments": "{}"}})),
     "messages[1].tool_calls[0]", "invalid_message"),
    ("legacy function_call not an object", body(messages=[*USER, {"role": "assistant", "function_call": "f"}]),
     "messages[1].function_call", "invalid_message"),
    # nesting
    ("deep unknown field", with_deep(body(extra="DEEP"), DEEP), None, "invalid_json"),
    ("deep tool schema", with_deep(body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "x": "DEEP"}}}]), 500),
     None, "invalid_json"),
    ("deep message content", with_deep(body(messages=[{"role": "user", "content": [{"type": "text", "text": "x", "junk": "DEEP"}]}]), 300),
     None, "invalid_json"),
    ("deep tool call arguments", with_deep(body(messages=assistant_calls({**CALL, "function": {"name": "f", "arguments": {"a": "DEEP"}}})), 400),
     None, "invalid_json"),
    # lone surrogates (json.dumps writes them as \ud800 escapes)
    ("surrogate in message text", body(messages=[{"role": "user", "content": SURROGATE}]), "messages[0].content", "invalid_unicode"),
    ("surrogate in a text part", body(messages=[{"role": "user", "content": [{"type": "text", "text": SURROGATE}]}]),
     "messages[0].content[0].text", "invalid_unicode"),
    ("surrogate in a tool name", body(tools=[tool(SURROGATE, "fine")]), "tools[0].function.name", "invalid_unicode"),
    ("surrogate in a tool description", body(tools=[tool("f", SURROGATE)]), "tools[0].function.description", "invalid_unicode"),
    ("surrogate in a tool result", body(messages=[*assistant_calls(CALL)[:2], {"role": "tool", "tool_call_id": "c1", "content": SURROGATE}]),
     "messages[2].content", "invalid_unicode"),
    ("surrogate in stop", body(stop=["ok", SURROGATE]), "stop[1]", "invalid_unicode"),
    ("surrogate in user", body(user=SURROGATE), "user", "invalid_unicode"),
    ("surrogate in a logit_bias key", body(logit_bias={"\udfff": 1}), "logit_bias", "invalid_unicode"),
    ("surrogate in the model name", {"model": SURROGATE, "messages": USER}, "model", "invalid_unicode"),
    ("low surrogate alone", body(messages=[{"role": "user", "content": "\udc00"}]), "messages[0].content", "invalid_unicode"),
    ("utf-8 encoded surrogate", b'{"model":"duet","messages":[{"role":"user","content":"\xed\xa0\x80"}]}', None, "invalid_json"),
    ("not utf-8", b'{"model":"duet","messages":[{"role":"user","content":"\xff"}]}', None, "invalid_json"),
]


def send(http: httpx.Client, payload: bytes | dict[str, Any], stream: bool) -> httpx.Response:
    if isinstance(payload, dict):
        payload = json.dumps({**payload, "stream": stream}).encode()  # ensure_ascii: surrogates as escapes
    elif stream:
        payload = payload[:-1] + b',"stream":true}'
    return http.post("/v1/chat/completions", content=payload, headers={"content-type": "application/json"})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("payload", "param", "code"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_refused_before_any_model_runs(
    http: httpx.Client, upstream: ScriptedUpstream, payload: bytes | dict[str, Any], param: str | None, code: str | None, stream: bool
) -> None:
    response = send(http, payload, stream)
    error = assert_error(response, 400, code, param)
    assert error["type"] == "invalid_request_error"
    assert upstream.requests == [], "a model was called for a request validation could refuse"


@pytest.mark.parametrize(
    "payload",
    [
        body(stream=None),
        body(stream=None, stream_options={"include_usage": None}),
        body(temperature=None, top_p=None, n=None, stop=None, max_tokens=None, seed=None, user=None, logit_bias=None,
             response_format=None, tools=None, tool_choice=None, parallel_tool_calls=None, presence_penalty=None),
        body(messages=[{"role": "user", "content": "emoji \ud83d\ude00 as an escaped pair"}]),  # a valid pair, not a lone surrogate
        body(stop=["a", "b", "c", "d"], logit_bias={"50256": -100, "1": 100}, seed=-(2**63), max_tokens=2**31 - 1, max_completion_tokens=2**31 - 1),
        body(response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True}}),
        body(tools=[{"type": "function", "function": {"name": "kb.search", "parameters": {"type": "object"}}}]),  # odd name: aliased
        body(tools=[tool(f"t{i}") for i in range(128)], tool_choice="required"),
        body(tool_choice="auto"),  # Dify's last round: tool history, no tools
        body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": True, "b": {}}}}}]),
        body(functions=[tool("f")["function"]], tool_choice="auto", function_call="auto"),
        body(extra=json.loads(nested(100))),  # deep, but not too deep
    ],
    ids=["stream null", "include_usage null", "all nullable fields null", "escaped emoji pair", "limits at their edge",
         "json_schema", "odd tool name", "128 tools", "tool_choice auto without tools", "boolean property schemas",
         "functions with tool_choice auto", "100 levels"],
)
def test_accepted(http: httpx.Client, upstream: ScriptedUpstream, payload: dict[str, Any]) -> None:
    response = http.post("/v1/chat/completions", content=json.dumps(payload).encode(), headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_nesting_at_the_limit_reaches_the_answer_model_intact(http: httpx.Client, upstream: ScriptedUpstream, stream: bool) -> None:
    """Nesting near the limit inside the parts Duet passes on (tool schema, response_format schema,
    tool-call arguments) is serialised again for the upstream without trouble."""
    depth = 120
    payload = body(
        messages=assistant_calls({**CALL, "function": {"name": "lookup", "arguments": {"a": "DEEP"}}}),
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "x-deep": "DEEP"}}}],
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "x-deep": "DEEP"}}},
        stream=stream,
    )
    response = http.post("/v1/chat/completions", content=with_deep(payload, depth), headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    sent = upstream.requests_for("qwen-tools")[0].body
    assert sent["tools"][0]["function"]["parameters"]["x-deep"] == json.loads(nested(depth))
    assert sent["response_format"]["json_schema"]["schema"]["x-deep"] == json.loads(nested(depth))
    [asked] = [message for message in sent["messages"] if message.get("tool_calls")]  # after the reasoning (reason_on_tool_results: auto)
    assert json.loads(asked["tool_calls"][0]["function"]["arguments"]) == {"a": json.loads(nested(depth))}


@pytest.mark.parametrize("padding", [0, 100 * 1024, 2 * 1024 * 1024], ids=["small body", "large body", "body of 2 MiB"])
@pytest.mark.parametrize(("levels", "status"), [(128, 200), (129, 400)])
def test_the_depth_limit_is_128_levels(http: httpx.Client, upstream: ScriptedUpstream, padding: int, levels: int, status: int) -> None:
    """One check, once parsed, whatever the size (large bodies, over 64 KiB, are parsed in a worker thread)."""
    payload = with_deep(body(messages=[{"role": "user", "content": "x" * padding}], extra="DEEP"), levels - 1)  # the body is a level
    response = http.post("/v1/chat/completions", content=payload, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text[:300]
    if status == 400:
        assert "128 levels" in assert_error(response, 400, "invalid_json")["message"]
        assert upstream.requests == []


def test_options_reach_the_answer_model_as_sent(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "default": None}}, "x-vendor": 1}
    assert http.post("/v1/chat/completions", json=body(response_format=response_format, stream=None)).status_code == 200
    assert upstream.requests_for("qwen-tools")[0].body["response_format"] == response_format


def test_a_hostile_unknown_model_name_gets_its_404(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    name = "\u202e\x00<script>\U0001f600" + "x" * 200
    error = assert_error(http.post("/v1/chat/completions", json={"model": name, "messages": USER}), 404, "model_not_found", "model")
    assert name in error["message"]
    assert upstream.requests == []


def test_refusals_are_not_logged_as_crashes(http: httpx.Client, duet: DuetServer) -> None:
    for _, payload, _, _ in CASES[:5] + CASES[-10:]:
        assert send(http, payload, False).status_code == 400
    log = duet.log.read_text()
    assert "Traceback" not in log and "RecursionError" not in log and "UnicodeEncodeError" not in log


PADDING = "x" * (2 * 1024 * 1024)  # checked before parsing, in a worker thread, in 1 MiB pieces


def cut_in_two(payload: bytes) -> bytes:
    """``payload`` padded at ``PAD`` so that the escape after it straddles the first 1 MiB boundary
    (the body is searched in 1 MiB pieces), and to over 1 MiB."""
    at = payload.index(b"PAD")
    return payload.replace(b"PAD", b"x" * (1024 * 1024 - 2 - at)) + b" " * 1024


@pytest.mark.parametrize(
    ("payload", "param", "code"),
    [
        (json.dumps(body(messages=[{"role": "user", "content": PADDING}, {"role": "user", "content": SURROGATE}])).encode(),
         "messages[1].content", "invalid_unicode"),
        (cut_in_two(json.dumps(body(messages=[{"role": "user", "content": "PAD\ud800"}], user="u")).encode()), "messages[0].content",
         "invalid_unicode"),
        (json.dumps(body(messages=[{"role": "user", "content": PADDING}], temperature="NAN")).replace('"NAN"', "NaN").encode(), None, "invalid_json"),
        (json.dumps(body(messages=[{"role": "user", "content": PADDING}])).encode().replace(b'xxx"', b'x\xff"', 1), None, "invalid_json"),
        (json.dumps(body(messages=[{"role": "user", "content": PADDING}])).encode()[:-10] + b'"\\"', None, "invalid_json"),  # unterminated
        (json.dumps(body(messages=[{"role": "user", "content": PADDING}], extra=[[]] * 600_000)).encode(), None, "invalid_json"),
        (json.dumps(body(messages=[{"role": "user", "content": PADDING}], max_tokens=10**30)).encode(), "max_tokens", "invalid_request"),
    ],
    ids=["surrogate", "surrogate across pieces", "nan", "not utf-8", "unterminated string", "600k values", "max_tokens"],
)
def test_large_bodies_are_refused_the_same_way(
    http: httpx.Client, upstream: ScriptedUpstream, payload: bytes, param: str | None, code: str
) -> None:
    assert len(payload) > 1024 * 1024  # more than one piece
    response = http.post("/v1/chat/completions", content=payload, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text[:300]
    assert_error(response, 400, code, param)
    assert upstream.requests == []


def test_a_large_body_is_served(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    payload = json.dumps(body(messages=[{"role": "user", "content": PADDING + " \ud83d\ude00"}])).encode()  # an escaped pair
    response = http.post("/v1/chat/completions", content=payload, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text[:300]
    assert users_words(upstream.requests_for("qwen-tools")[0].body["messages"][-1]["content"]).endswith(" \U0001f600")


def test_the_configured_limits_apply(upstream: ScriptedUpstream, tmp_path: Any) -> None:
    """``max_messages`` and ``max_tools`` are ServiceOptions: DUET_* variables (or YAML keys)."""
    env = {"DUET_MAX_MESSAGES": "3", "DUET_MAX_TOOLS": "2", "DUET_API_KEYS": "", "DUET_MODEL_NAME": "duet",
           "DUET_REASONER_BASE_URL": upstream.base_url, "DUET_ANSWER_BASE_URL": upstream.base_url}
    server = DuetServer([], env, tmp_path / "duet.log")
    try:
        url = f"{server.base_url}/v1/chat/completions"
        assert_error(httpx.post(url, json=body(messages=USER * 4)), 400, "too_many_items", "messages")
        assert_error(httpx.post(url, json=body(tools=[tool("a"), tool("b"), tool("c")])), 400, "too_many_items", "tools")
        assert upstream.requests == []
        assert httpx.post(url, json=body(messages=USER * 3, tools=[tool("a"), tool("b")]), timeout=30).status_code == 200
    finally:
        server.stop()
