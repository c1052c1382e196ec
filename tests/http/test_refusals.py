"""What an upstream would refuse after the reasoner ran is refused before any model call, on every
protocol; a name of the wrong JSON type is a 400, never a 500; errors keep their protocol's shape on
every path under its prefix.

Each case goes over real HTTP to ``duet serve``, streamed and not; the scripted upstream records
every request it gets, so "no model was called" is checked, not assumed (issue 23: these reached the
upstream after two model calls, or answered 500).
"""

from __future__ import annotations

import json
from typing import Any, Callable

import anthropic
import httpx
import pytest

from tests.conftest import API_KEY, DuetServer
from tests.scripted_upstream import ScriptedUpstream

USER = [{"role": "user", "content": "hi"}]

# Parameter schemas OpenAI or Anthropic refuse (or no validator can follow), and what the 400 says.
BAD_SCHEMAS: list[tuple[str, Any, str]] = [
    ("empty", {}, "type 'object'"),
    ("no type", {"a": 1}, "type 'object'"),
    ("only a self reference", {"$ref": "#"}, "type 'object'"),
    ("a string schema", {"type": "string"}, "type 'object'"),
    ("a bad keyword value", {"type": "object", "properties": {"a": {"type": "strin"}}}, "properties.a.type"),
    ("required not a list", {"type": "object", "required": "a"}, "required"),
    ("an unresolved reference", {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not resolve"),
    ("a remote reference", {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}, "does not resolve"),
    ("a reference loop", {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}},
                          "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}}, "leads back to itself"),
    ("the root referring to itself", {"type": "object", "$ref": "#"}, "leads back to itself"),
    ("an allOf loop", {"type": "object", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "properties": {"p": {"$ref": "#/$defs/a"}}},
     "leads back to itself"),
    ("an invalid pattern", {"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}}, "properties.a.pattern"),
]
GOOD_SCHEMAS: list[tuple[str, Any]] = [
    ("a recursive tree", {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}}),
    ("definitions", {"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}}}),
    ("draft-07 tuple items", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                              "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}}}),
    ("an ECMA pattern", {"type": "object", "properties": {"a": {"type": "string", "pattern": "^\\p{L}+$"}}}),
    ("boolean schemas", {"type": "object", "properties": {"a": True, "b": {}}, "additionalProperties": False}),
]


def chat_tool(schema: Any) -> tuple[str, dict[str, Any], str]:
    return "/v1/chat/completions", {"model": "duet", "messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}, "tools.0.function.parameters"


def chat_function(schema: Any) -> tuple[str, dict[str, Any], str]:
    return "/v1/chat/completions", {"model": "duet", "messages": USER, "functions": [{"name": "f", "parameters": schema}]}, "functions.0.parameters"


def responses_tool(schema: Any) -> tuple[str, dict[str, Any], str]:
    return "/v1/responses", {"model": "duet", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": schema}]}, "tools[0].parameters"


def responses_namespace(schema: Any) -> tuple[str, dict[str, Any], str]:
    tools = [{"type": "namespace", "name": "crm", "description": "d", "tools": [{"type": "function", "name": "f", "parameters": schema}]}]
    return "/v1/responses", {"model": "duet", "input": "hi", "tools": tools}, "tools[0].tools[0].parameters"


def messages_tool(schema: Any) -> tuple[str, dict[str, Any], str]:
    return "/v1/messages", {"model": "duet", "max_tokens": 10, "messages": USER, "tools": [{"name": "f", "input_schema": schema}]}, "tools.0.input_schema"


def count_tokens_tool(schema: Any) -> tuple[str, dict[str, Any], str]:
    _path, body, param = messages_tool(schema)
    return "/v1/messages/count_tokens", body, param


def chat_response_format(schema: Any) -> tuple[str, dict[str, Any], str]:
    return "/v1/chat/completions", {"model": "duet", "messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}}, "response_format.json_schema.schema"


def responses_text_format(schema: Any) -> tuple[str, dict[str, Any], str]:
    return "/v1/responses", {"model": "duet", "input": "hi", "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema}}}, "text.format.schema"


TOOL_PLACES: list[Callable[[Any], tuple[str, dict[str, Any], str]]] = [
    chat_tool, chat_function, responses_tool, responses_namespace, messages_tool, count_tokens_tool]

# (case, path, body, the param the 400 names)
OTHER_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("chat max_tokens 2**31", "/v1/chat/completions", {"model": "duet", "messages": USER, "max_tokens": 2**31}, "max_tokens"),
    ("responses max_output_tokens 2**31", "/v1/responses", {"model": "duet", "input": "hi", "max_output_tokens": 2**31}, "max_output_tokens"),
    ("responses max_output_tokens 2**62", "/v1/responses", {"model": "duet", "input": "hi", "max_output_tokens": 2**62}, "max_output_tokens"),
    ("messages max_tokens 2**31", "/v1/messages", {"model": "duet", "max_tokens": 2**31, "messages": USER}, "max_tokens"),
    ("five stop_sequences", "/v1/messages", {"model": "duet", "max_tokens": 10, "messages": USER, "stop_sequences": list("abcde")},
     "stop_sequences"),
    ("responses metadata key over 64", "/v1/responses", {"model": "duet", "input": "hi", "metadata": {"k" * 65: "v"}}, "metadata"),
    ("responses metadata value over 512", "/v1/responses", {"model": "duet", "input": "hi", "metadata": {"k": "v" * 513}}, "metadata.k"),
    ("responses 17 metadata pairs", "/v1/responses", {"model": "duet", "input": "hi", "metadata": {str(i): "v" for i in range(17)}},
     "metadata"),
    # a name of the wrong JSON type (issue 23: each was a 500 from a set lookup)
    ("responses tool type a list", "/v1/responses", {"model": "duet", "input": "hi", "tools": [{"type": []}]}, "tools[0].type"),
    ("responses tool type an object", "/v1/responses", {"model": "duet", "input": "hi", "tools": [{"type": {"a": 1}}]}, "tools[0].type"),
    ("responses namespaced tool type a list", "/v1/responses", {"model": "duet", "input": "hi", "tools": [
        {"type": "namespace", "name": "n", "tools": [{"type": []}]}]}, "tools[0].tools[0].type"),
    ("responses item type a list", "/v1/responses", {"model": "duet", "input": [{"type": [], "role": "user", "content": "hi"}]}, "input[0].type"),
    ("responses call namespace a list", "/v1/responses", {"model": "duet", "input": [
        {"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "namespace": ["n"]}]},
     "input[1].namespace"),
    ("responses custom tool description a list", "/v1/responses", {"model": "duet", "input": "hi", "tools": [
        {"type": "custom", "name": "c", "description": ["x"]}]}, "tools[0].description"),
    ("responses custom tool grammar without syntax", "/v1/responses", {"model": "duet", "input": "hi", "tools": [
        {"type": "custom", "name": "c", "format": {"type": "grammar", "definition": "start: /x/"}}]}, "tools[0].format"),
    ("responses custom tool format a list", "/v1/responses", {"model": "duet", "input": "hi", "tools": [
        {"type": "custom", "name": "c", "format": [1]}]}, "tools[0].format"),
    ("messages block type a list", "/v1/messages", {"model": "duet", "max_tokens": 10, "messages": [{"role": "user", "content": [{"type": []}]}]},
     "messages.0.content.0.type"),
    ("messages assistant block type an object", "/v1/messages", {"model": "duet", "max_tokens": 10, "messages": [
        *USER, {"role": "assistant", "content": [{"type": {"t": 1}}]}]}, "messages.1.content.0.type"),
    ("count_tokens block type a list", "/v1/messages/count_tokens", {"model": "duet", "messages": [{"role": "user", "content": [{"type": []}]}]},
     "messages.0.content.0.type"),
]


def sent(duet: DuetServer, path: str, body: dict[str, Any], stream: bool) -> httpx.Response:
    if stream and not path.endswith("count_tokens"):
        body = {**body, "stream": True}
    return httpx.post(f"{duet.base_url}{path}", content=json.dumps(body).encode(), timeout=30,
                      headers={"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"})


def assert_refused(response: httpx.Response, path: str, param: str, says: str = "") -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    if "/messages" in path:  # Anthropic's shape: the param is named in the message
        assert set(body) == {"type", "error"} and body["error"]["type"] == "invalid_request_error", body
        message = body["error"]["message"]
        assert message.startswith(param), (param, message)
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        message = body["error"]["message"]
        assert body["error"]["param"] is not None and body["error"]["param"].startswith(param), (param, body)
    assert says in message, (says, message)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("place", TOOL_PLACES, ids=[place.__name__ for place in TOOL_PLACES])
@pytest.mark.parametrize(("schema", "says"), [case[1:] for case in BAD_SCHEMAS], ids=[case[0] for case in BAD_SCHEMAS])
def test_a_tool_schema_an_upstream_refuses_costs_no_model_call(duet: DuetServer, upstream: ScriptedUpstream, schema: Any, says: str,
                                                               place: Callable[[Any], tuple[str, dict[str, Any], str]], stream: bool) -> None:
    path, body, param = place(schema)
    assert_refused(sent(duet, path, body, stream), path, param, says)
    assert upstream.requests == [], "a model was called for a schema validation could refuse"


@pytest.mark.parametrize("place", [chat_response_format, responses_text_format], ids=["chat", "responses"])
@pytest.mark.parametrize(("schema", "says"), [case[1:] for case in BAD_SCHEMAS if "type 'object'" not in case[2]],
                         ids=[case[0] for case in BAD_SCHEMAS if "type 'object'" not in case[2]])
def test_a_response_format_schema_an_upstream_refuses_costs_no_model_call(duet: DuetServer, upstream: ScriptedUpstream, schema: Any,
                                                                          says: str, place: Callable[[Any], tuple[str, dict[str, Any], str]]) -> None:
    path, body, param = place(schema)
    assert_refused(sent(duet, path, body, False), path, param, says)
    assert upstream.requests == []


@pytest.mark.parametrize("place", TOOL_PLACES, ids=[place.__name__ for place in TOOL_PLACES])
@pytest.mark.parametrize("schema", [case[1] for case in GOOD_SCHEMAS], ids=[case[0] for case in GOOD_SCHEMAS])
def test_valid_schemas_pass_untouched(duet: DuetServer, upstream: ScriptedUpstream, schema: Any,
                                      place: Callable[[Any], tuple[str, dict[str, Any], str]]) -> None:
    path, body, _ = place(schema)
    upstream.enforce_openai_rules()
    response = sent(duet, path, body, False)
    assert response.status_code == 200, response.text
    for request in upstream.requests:
        assert request.refused is None, request.refused
        for sent_tool in request.body.get("tools", []):
            assert sent_tool["function"]["parameters"] == schema


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("path", "body", "param"), [case[1:] for case in OTHER_CASES], ids=[case[0] for case in OTHER_CASES])
def test_refused_before_any_model_call(duet: DuetServer, upstream: ScriptedUpstream, path: str, body: dict[str, Any], param: str,
                                       stream: bool) -> None:
    assert_refused(sent(duet, path, body, stream), path, param)
    assert upstream.requests == [], "a model was called for a request validation could refuse"


def test_four_stop_sequences_and_the_largest_token_limits_reach_the_answer_model(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.enforce_openai_rules()
    response = sent(duet, "/v1/messages", {"model": "duet", "max_tokens": 2**31 - 1, "messages": USER, "stop_sequences": list("abcd")}, False)
    assert response.status_code == 200, response.text
    answer = upstream.requests[-1].body
    assert answer["stop"] == list("abcd") and answer["max_tokens"] == 2**31 - 1
    response = sent(duet, "/v1/chat/completions", {"model": "duet", "messages": USER, "stop": []}, False)
    assert response.status_code == 200 and "stop" not in upstream.requests[-1].body  # an empty list asks for nothing
    assert upstream.refused_requests() == []


# ---- errors in the protocol's shape on every path under its prefix ------------------------------

ROUTING: list[tuple[str, str, int, str]] = [
    ("GET", "/v1/messages", 405, "anthropic"),
    ("GET", "/messages", 405, "anthropic"),
    ("POST", "/v1/messages/batches", 404, "anthropic"),
    ("GET", "/v1/messages/batches/msgbatch_1/results", 404, "anthropic"),
    ("GET", "/v1/messages/count_tokens", 405, "anthropic"),
    ("POST", "/messages/unknown", 404, "anthropic"),
    ("GET", "/v1/responses", 405, "openai"),
    ("POST", "/v1/responses/resp_1/cancel", 404, "openai"),
    ("GET", "/v1/chat/completions", 405, "openai"),
    ("POST", "/v1/messagesx", 404, "openai"),  # not under the prefix
    ("GET", "/v1/nothing", 404, "openai"),
]


@pytest.mark.parametrize(("method", "path", "status", "shape"), ROUTING, ids=[f"{m} {p}" for m, p, _, _ in ROUTING])
def test_routing_errors_have_the_shape_of_the_protocol_whose_path_it_is(duet: DuetServer, method: str, path: str, status: int,
                                                                         shape: str) -> None:
    response = httpx.request(method, f"{duet.base_url}{path}", headers={"x-api-key": API_KEY, "content-type": "application/json"},
                             content=b"{}" if method == "POST" else None)
    assert response.status_code == status, response.text
    body = response.json()
    if shape == "anthropic":
        expected = "not_found_error" if status == 404 else "invalid_request_error"
        assert body == {"type": "error", "error": {"type": expected, "message": body["error"]["message"]}}, body
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    if status == 405:
        assert response.headers["allow"]


def test_the_anthropic_sdk_reads_an_unserved_route_as_its_not_found_error(duet: DuetServer) -> None:
    with anthropic.Anthropic(base_url=duet.base_url, api_key=API_KEY, max_retries=0) as client:
        with pytest.raises(anthropic.NotFoundError) as raised:
            client.messages.batches.list()
    assert raised.value.body["type"] == "error"  # type: ignore[index]


def test_the_refusals_left_no_crash_in_the_log(duet: DuetServer) -> None:
    log = duet.log.read_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-3000:]
