"""Property-based fuzzing of the request body, over real HTTP against ``duet serve``.

Hypothesis builds hostile bodies — valid requests with fields mutated into wrong types, huge,
negative and non-finite numbers, lone surrogates and odd Unicode, deep nesting, random extra
fields, random JSON that is no request at all — sends each streamed or not, and checks what any
client may rely on:

- never a 5xx;
- every refusal has the OpenAI error shape, and no model was called for it;
- no HTTP 200 carries an error: a collected answer is a ``chat.completion``, a stream ends with
  ``[DONE]`` and holds no error event (the scripted upstream never fails here);
- what reaches the upstream is strict JSON in UTF-8 (no ``NaN``, no lone surrogates).

The budget is fixed and the run deterministic (``derandomize``), so a failure reproduces.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import API_KEY, DuetServer, sse_events, tool
from tests.scripted_upstream import ScriptedUpstream

EXAMPLES = 250

HOSTILE_TEXT = ["", "\ud800", "\udfff", "a\udc00b", "\x00", "\u202e", "\U0001f600", "\ufeff", "\\", '"', "x" * 5000, "<think>", "</think>"]
HOSTILE_NUMBERS = [
    0, -1, 1, 2, 4, 5, 100, 101, -101, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**400,
    0.5, -0.0, 1e-300, 1e308, float("nan"), float("inf"), float("-inf"),
]
KNOWN_FIELDS = [
    "model", "messages", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "functions",
    "function_call", "n", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "presence_penalty",
    "frequency_penalty", "seed", "response_format", "user", "logit_bias",
]

texts = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(st.characters(exclude_categories=()), max_size=20))
scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(HOSTILE_NUMBERS), st.integers(), st.floats(), texts)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(texts, children, max_size=4)),
    max_leaves=12,
)

DEEP_SPOT = "<deeply nested value goes here>"
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"query": "x"}'}}
VALID_BODIES = [
    {"model": "duet", "messages": [{"role": "user", "content": "hi"}]},
    {"model": "answer-only", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
     "temperature": 0.2, "stop": ["Observation"], "max_tokens": 50, "stream_options": {"include_usage": True}},
    {"model": "duet", "messages": [{"role": "user", "content": "find x"}], "tools": [tool("lookup")], "tool_choice": "auto"},
    {"model": "duet", "messages": [{"role": "user", "content": "find x"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
                                   {"role": "tool", "tool_call_id": "call_1", "content": "found"}], "tools": [tool("lookup")]},
    {"model": "duet", "messages": [{"role": "user", "content": "hi"}], "functions": [tool("kb.search")["function"]],
     "function_call": "auto", "logit_bias": {"50256": -100}, "seed": 7, "response_format": {"type": "json_object"}},
]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside ``value`` a mutation may replace."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*path, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)
    return copy


@st.composite
def mutated_request(draw: st.DrawFn) -> Any:
    body: Any = json.loads(json.dumps(draw(st.sampled_from(VALID_BODIES))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "set field", "drop field", "extra field"]))
        if kind == "replace":
            body = _replace(body, draw(st.sampled_from(_paths(body))), draw(json_values))
        elif isinstance(body, dict) and kind == "set field":
            body[draw(st.sampled_from(KNOWN_FIELDS))] = draw(json_values)
        elif isinstance(body, dict) and kind == "drop field" and body:
            body.pop(draw(st.sampled_from(sorted(body, key=str))))
        elif isinstance(body, dict):
            body[draw(texts)] = draw(json_values)
    return body


@st.composite
def hostile_body(draw: st.DrawFn) -> tuple[bytes, bool]:
    """Raw body bytes, and whether they ask for a stream."""
    body = draw(st.one_of(mutated_request(), json_values, st.sampled_from(VALID_BODIES).map(lambda b: json.loads(json.dumps(b)))))
    stream = draw(st.booleans())
    if isinstance(body, dict) and draw(st.booleans()):
        body["stream"] = stream
    deep = None
    if draw(st.integers(0, 9)) == 0:  # nest a value deep, past what json.dumps itself can write
        depth = draw(st.sampled_from([64, 127, 129, 500, 2000]))
        deep = "[" * depth + "1" + "]" * depth
        body = _replace(body, draw(st.sampled_from(_paths(body))), DEEP_SPOT)
    text = json.dumps(body, ensure_ascii=draw(st.booleans()), allow_nan=True)
    if deep is not None:
        text = text.replace(json.dumps(DEEP_SPOT), deep)
    raw = text.encode("utf-8", "surrogatepass")  # with ensure_ascii=False, lone surrogates go out as raw bytes
    return raw, bool(body.get("stream")) if isinstance(body, dict) else False


def _not_json(name: str) -> None:
    raise AssertionError(f"Duet sent {name} to the upstream")


def _check(response: httpx.Response, stream: bool, upstream_calls: int, upstream: ScriptedUpstream, raw: bytes) -> None:
    status = response.status_code
    assert status < 500, (status, response.text[:500], raw[:500])
    if status != 200:
        error = response.json()
        assert set(error) == {"error"} and set(error["error"]) == {"message", "type", "param", "code"}, error
        assert isinstance(error["error"]["message"], str) and error["error"]["message"]
        assert len(upstream.requests) == upstream_calls, f"a model was called for a refused request: {raw[:300]!r}"
        return
    for sent in upstream.requests[upstream_calls:]:  # what Duet passed on is strict JSON in UTF-8
        json.loads(sent.raw.decode("utf-8"), parse_constant=_not_json)
    if response.headers["content-type"].startswith("text/event-stream"):
        events = sse_events(response.content)
        assert events and events[-1] == "[DONE]", response.text[-500:]
        assert not any(isinstance(e, dict) and "error" in e for e in events), response.text[-500:]
        return
    body = response.json()
    assert "error" not in body and body["object"] == "chat.completion", body


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=hostile_body())
def test_no_body_gets_a_5xx_or_a_200_with_an_error(case: tuple[bytes, bool], duet: DuetServer, upstream: ScriptedUpstream) -> None:
    raw, stream = case
    calls = len(upstream.requests)
    headers = {"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
    response = httpx.post(f"{duet.base_url}/v1/chat/completions", content=raw, headers=headers, timeout=30)
    event(f"HTTP {response.status_code}{' stream' if stream else ''}")  # --hypothesis-show-statistics
    _check(response, stream, calls, upstream, raw)


def test_the_fuzzing_left_no_crash_in_the_log(duet: DuetServer) -> None:
    """Runs after the fuzz test (file order): nothing it sent was logged as an internal error."""
    log = duet.log.read_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-3000:]
