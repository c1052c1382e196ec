"""Hostile request bodies for every protocol route, and what any client may rely on in the answer.

Used by ``tests/http/test_fuzz.py`` (a fixed, derandomised budget per route) and ``bench/fuzz.py`` (the
big campaign, whose counts go to ``bench/results/``). Hypothesis builds the bodies: valid requests
of the route (``Route.seeds``) with fields mutated into wrong types, huge, negative and non-finite
numbers, lone surrogates and odd Unicode, deep nesting, random extra fields, and random JSON that is
no request at all. :func:`problems` says what is wrong with an answer:

- a 5xx;
- a refusal not in the protocol's error shape, or one for which a model was called;
- an HTTP 200 carrying an error (an error event in a stream, a failed response, an error body);
- a request Duet sent an upstream that OpenAI's documented rules refuse (:mod:`tests.openai_rules`),
  or that is not strict JSON in UTF-8.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
from hypothesis import strategies as st

from tests.conftest import sse_events, tool
from tests.scripted_upstream import ScriptedUpstream

HOSTILE_TEXT = ["", "\ud800", "\udfff", "a\udc00b", "\x00", "\u202e", "\U0001f600", "\ufeff", "\\", '"', "x" * 5000, "<think>", "</think>"]
HOSTILE_NUMBERS = [
    0, -1, 1, 2, 4, 5, 16, 100, 101, -101, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**400,
    0.5, -0.0, 1e-300, 1e308, float("nan"), float("inf"), float("-inf"),
]
# Names where a type or a role belongs: a list or an object here once crashed a set lookup (issue 23).
HOSTILE_NAMES = ["function", "custom", "namespace", "message", "text", "tool_use", "tool_result", "thinking", "web_search",
                 "object", "#", "#/$defs/x", "user", "assistant", "system"]

texts = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(st.characters(exclude_categories=()), max_size=20))
scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(HOSTILE_NUMBERS), st.integers(), st.floats(), texts,
                    st.sampled_from(HOSTILE_NAMES))
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(texts, children, max_size=4)),
    max_leaves=12,
)
DEEP_SPOT = "<deeply nested value goes here>"

OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}
ANTHROPIC_ERROR_TYPES = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large",
                         "rate_limit_error", "api_error", "overloaded_error"}


# ---- the routes ---------------------------------------------------------------------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"query": "x"}'}}
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}, "n": {"$ref": "#/$defs/count"}},
          "required": ["query"], "$defs": {"count": {"type": "integer", "minimum": 0}}}
CHAT_SEEDS = [
    {"model": "duet", "messages": [{"role": "user", "content": "hi"}]},
    {"model": "answer-only", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
     "temperature": 0.2, "stop": ["Observation"], "max_tokens": 50, "stream_options": {"include_usage": True}},
    {"model": "duet", "messages": [{"role": "user", "content": "find x"}], "tools": [tool("lookup")], "tool_choice": "auto"},
    {"model": "duet", "messages": [{"role": "user", "content": "find x"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
                                   {"role": "tool", "tool_call_id": "call_1", "content": "found"}], "tools": [tool("lookup")]},
    {"model": "duet", "messages": [{"role": "user", "content": "hi"}], "functions": [tool("kb.search")["function"]],
     "function_call": "auto", "logit_bias": {"50256": -100}, "seed": 7, "response_format": {"type": "json_object"}},
    {"model": "duet", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}],
     "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}},
]
CHAT_FIELDS = ["model", "messages", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "functions",
               "function_call", "n", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "presence_penalty",
               "frequency_penalty", "seed", "response_format", "user", "logit_bias"]

FUNCTION = {"type": "function", "name": "lookup", "description": "Looks a thing up.", "parameters": SCHEMA}
RESPONSES_SEEDS = [
    {"model": "duet", "input": "hi"},
    {"model": "answer-only", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "instructions": "Be brief.",
     "temperature": 0.2, "top_p": 0.9, "max_output_tokens": 50, "metadata": {"k": "v"}, "user": "u1", "store": False},
    {"model": "duet", "input": "find x", "tool_choice": "auto", "parallel_tool_calls": False, "tools": [
        FUNCTION, {"type": "custom", "name": "shell", "description": "Runs a command.",
                   "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
        {"type": "namespace", "name": "crm", "description": "The CRM.", "tools": [{**FUNCTION, "name": "find"}]},
        {"type": "web_search"}]},
    {"model": "duet", "tools": [FUNCTION], "input": [
        {"type": "message", "role": "developer", "content": "Use the tools."}, {"role": "user", "content": "find x"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"query": "x"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "found"}]},
    {"model": "duet", "input": "hi", "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}},
     "tools": [FUNCTION], "tool_choice": {"type": "function", "name": "lookup"}, "reasoning": {"effort": "low"}, "include": []},
    {"model": "duet", "input": [{"type": "item_reference", "id": "msg_1"}], "previous_response_id": "resp_1"},
]
RESPONSES_FIELDS = ["model", "input", "instructions", "stream", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
                    "temperature", "top_p", "text", "reasoning", "metadata", "user", "store", "include", "previous_response_id"]

WEATHER = {"name": "get_weather", "description": "The weather in a city.", "input_schema": SCHEMA}
MESSAGES_SEEDS = [
    {"model": "duet", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
    {"model": "answer-only", "max_tokens": 50, "system": "Be brief.", "temperature": 0.5, "top_p": 0.9, "top_k": 5,
     "stop_sequences": ["END"], "metadata": {"user_id": "u1"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
     "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]},
    {"model": "claude-sonnet-4-5", "max_tokens": 100, "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
     "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}, "messages": [{"role": "user", "content": "Weather in Paris?"}]},
    {"model": "duet", "max_tokens": 100, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"query": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sunny"}],
                                      "is_error": False}, {"type": "text", "text": "Thanks."}]}]},
    {"model": "duet", "max_tokens": 100, "system": [{"type": "text", "text": "You help."}], "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                                     {"type": "text", "text": "What is it?"}]}]},
]
MESSAGES_FIELDS = ["model", "max_tokens", "messages", "system", "stream", "tools", "tool_choice", "stop_sequences", "temperature",
                   "top_p", "top_k", "thinking", "metadata"]


@dataclass(frozen=True)
class Route:
    """A protocol route as the fuzz sees it: valid bodies to mutate, its fields, its answers' shapes."""

    name: str
    path: str
    seeds: list[dict[str, Any]]
    fields: list[str]
    error_shape: str  # "openai" or "anthropic"
    answer: Callable[[httpx.Response], str | None]  # what is wrong with a 200, if anything
    streams: bool = True


def _chat_answer(response: httpx.Response) -> str | None:
    if response.headers["content-type"].startswith("text/event-stream"):
        events = sse_events(response.content)
        if not events or events[-1] != "[DONE]":
            return "the stream did not end with [DONE]"
        return "a 200 stream carries an error event" if any(isinstance(e, dict) and "error" in e for e in events) else None
    body = response.json()
    return None if "error" not in body and body.get("object") == "chat.completion" else f"a 200 that is no chat.completion: {body}"


def _named_events(raw: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in raw.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if lines:
            name = next((line[len("event: "):] for line in lines if line.startswith("event: ")), "")
            data = next((line[len("data: "):] for line in lines if line.startswith("data: ")), "null")
            events.append((name, json.loads(data)))
    return events


def _responses_answer(response: httpx.Response) -> str | None:
    if response.headers["content-type"].startswith("text/event-stream"):
        events = _named_events(response.content)
        names = [name for name, _ in events]
        if not names or names[-1] not in ("response.completed", "response.incomplete"):
            return f"the stream ended with {names[-1:] or 'nothing'}, not a completed response"
        return "a 200 stream carries an error event" if {"response.failed", "error"} & set(names) else None
    body = response.json()
    if body.get("object") != "response" or body.get("error") is not None or body.get("status") not in ("completed", "incomplete"):
        return f"a 200 that is no completed response: {str(body)[:300]}"
    return None


def _messages_answer(response: httpx.Response) -> str | None:
    if response.headers["content-type"].startswith("text/event-stream"):
        names = [name for name, _ in _named_events(response.content)]
        if not names or names[-1] != "message_stop":
            return f"the stream ended with {names[-1:] or 'nothing'}, not message_stop"
        return "a 200 stream carries an error event" if "error" in names else None
    body = response.json()
    return None if body.get("type") == "message" else f"a 200 that is no message: {str(body)[:300]}"


def _count_answer(response: httpx.Response) -> str | None:
    body = response.json()
    return None if set(body) == {"input_tokens"} and isinstance(body["input_tokens"], int) else f"not a token count: {body}"


ROUTES = {
    "chat": Route("chat", "/v1/chat/completions", CHAT_SEEDS, CHAT_FIELDS, "openai", _chat_answer),
    "responses": Route("responses", "/v1/responses", RESPONSES_SEEDS, RESPONSES_FIELDS, "openai", _responses_answer),
    "messages": Route("messages", "/v1/messages", MESSAGES_SEEDS, MESSAGES_FIELDS, "anthropic", _messages_answer),
    "count_tokens": Route("count_tokens", "/v1/messages/count_tokens", MESSAGES_SEEDS, MESSAGES_FIELDS, "anthropic", _count_answer,
                          streams=False),
}


# ---- the bodies ---------------------------------------------------------------------------------

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


def _fresh(seed: dict[str, Any]) -> Any:
    return json.loads(json.dumps(seed))


NAME_KEYS = {"type", "role", "name", "namespace", "id", "call_id", "tool_use_id", "tool_call_id", "model", "syntax", "$ref", "mode"}
"""Fields that hold a name Duet looks up (in a set, a dict) or compares."""
# A value of another JSON type than the one a field holds: a list or an object where a name belongs, ...
other_types = st.one_of(st.just([]), st.just({}), st.lists(scalars, min_size=1, max_size=3), st.dictionaries(texts, scalars, min_size=1, max_size=3),
                        st.sampled_from([0, -1, 2**63, 1.5, True, False, None, ""]))


@st.composite
def mutated_request(draw: st.DrawFn, route: Route) -> Any:
    body: Any = _fresh(draw(st.sampled_from(route.seeds)))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "retype field", "retype field", "set field", "drop field", "extra field"]))
        fields = [path for path in _paths(body) if path and isinstance(path[-1], str)]
        names = [path for path in fields if path[-1] in NAME_KEYS]
        if kind == "retype field" and fields:  # a field (most often a type, a role, a name, an id) of another type
            body = _replace(body, draw(st.sampled_from(names if names and draw(st.integers(0, 3)) else fields)), draw(other_types))
        elif kind == "replace":
            body = _replace(body, draw(st.sampled_from(_paths(body))), draw(json_values))
        elif isinstance(body, dict) and kind == "set field":
            body[draw(st.sampled_from(route.fields))] = draw(json_values)
        elif isinstance(body, dict) and kind == "drop field" and body:
            body.pop(draw(st.sampled_from(sorted(body, key=str))))
        elif isinstance(body, dict):
            body[draw(texts)] = draw(json_values)
    return body


@st.composite
def hostile_body(draw: st.DrawFn, route: Route) -> tuple[bytes, bool]:
    """Raw body bytes for ``route``, and whether they ask for a stream."""
    body = draw(st.one_of(mutated_request(route), mutated_request(route), mutated_request(route), json_values,
                          st.sampled_from(route.seeds).map(_fresh)))
    if isinstance(body, dict) and route.streams and draw(st.booleans()):
        body["stream"] = draw(st.booleans())
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


# ---- the answers --------------------------------------------------------------------------------

def _not_json(name: str) -> None:
    raise ValueError(f"Duet sent {name} to the upstream")


def _error_shape_problem(route: Route, response: httpx.Response) -> str | None:
    try:
        error = response.json()
    except ValueError:
        return f"a {response.status_code} whose body is not JSON: {response.text[:200]}"
    if route.error_shape == "anthropic":
        ok = (isinstance(error, dict) and set(error) == {"type", "error"} and error["type"] == "error" and isinstance(error["error"], dict)
              and set(error["error"]) == {"type", "message"} and error["error"]["type"] in ANTHROPIC_ERROR_TYPES)
    else:
        ok = isinstance(error, dict) and set(error) == {"error"} and isinstance(error["error"], dict) and set(error["error"]) == OPENAI_ERROR_KEYS
    if not ok:
        return f"a {response.status_code} not in the {route.error_shape} error shape: {str(error)[:300]}"
    message = error["error"]["message"]
    return None if isinstance(message, str) and message else "an error without a message"


def problems(route: Route, response: httpx.Response, upstream: ScriptedUpstream, calls_before: int) -> list[str]:
    """What is wrong with ``response`` (empty: nothing); ``calls_before``: the upstream's requests before it was sent."""
    found: list[str] = []
    status = response.status_code
    sent = upstream.requests[calls_before:]
    if status >= 500:
        found.append(f"HTTP {status}: {response.text[:300]}")
    elif status != 200:
        if (shape := _error_shape_problem(route, response)) is not None:
            found.append(shape)
        if sent and not any(record.refused for record in sent):
            found.append(f"a model was called for a refused request ({len(sent)} calls)")
    elif (wrong := route.answer(response)) is not None:
        found.append(wrong)
    for record in sent:
        if record.refused is not None:
            found.append(f"the upstream refused what Duet sent: {record.refused}")
        try:
            json.loads(record.raw.decode("utf-8"), parse_constant=_not_json)
        except ValueError as exc:
            found.append(f"the upstream got no strict JSON in UTF-8: {exc}")
    return found


@dataclass
class Tally:
    """A campaign's counts: bodies tried, statuses, and each kind of problem."""

    tried: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: int = 0
    ok_with_error: int = 0
    upstream_refused: int = 0
    model_called_for_refusal: int = 0
    other: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, response: httpx.Response, found: list[str], raw: bytes) -> None:
        self.tried += 1
        self.statuses[response.status_code] += 1
        for problem in found:
            if problem.startswith("HTTP 5"):
                self.server_errors += 1
            elif problem.startswith("the upstream refused"):
                self.upstream_refused += 1
            elif problem.startswith("a model was called"):
                self.model_called_for_refusal += 1
            elif response.status_code == 200:
                self.ok_with_error += 1
            else:
                self.other += 1
        if found and len(self.examples) < 10:
            self.examples.append(f"{found[0]} <- {raw[:300]!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"bodies": self.tried, "statuses": dict(sorted(self.statuses.items())), "5xx": self.server_errors,
                "200_with_error": self.ok_with_error, "failed_at_upstream": self.upstream_refused,
                "model_called_for_a_refusal": self.model_called_for_refusal, "other_problems": self.other,
                "examples": self.examples}
