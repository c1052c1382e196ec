"""Client tools: proxied to the answer model, returned as tool_calls, results continued from."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, sse_events, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream, users_words

WEATHER = tool("get_weather", "Current weather for a city.", {"city": {"type": "string", "description": "City name"}})
QUESTION = [{"role": "user", "content": "Weather in Paris and Rome?"}]
VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.fixture
def sdk(duet: DuetServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{duet.base_url}/v1", api_key=API_KEY, max_retries=0)


def answer_with_result(body: dict[str, Any]) -> Reply:
    """The scripted answer model, second round: answers from the tool results it was given."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return Reply(content=["Result: ", " / ".join(results)])


def test_round_trip_with_the_openai_sdk(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(content=["Checking."], tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}', pieces=4)]))
    with sdk.chat.completions.stream(model="duet", messages=QUESTION, tools=[WEATHER]) as stream:
        first = stream.get_final_completion()
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    assert upstream.requests_for(ANSWER)[0].body["tools"] == [WEATHER]

    upstream.script(ANSWER, answer_with_result)
    history = [
        *QUESTION,
        {"role": "assistant", "content": choice.message.content, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18°C and sunny"},
    ]
    with sdk.chat.completions.stream(model="duet", messages=history, tools=[WEATHER]) as stream:
        second = stream.get_final_completion()
    assert second.choices[0].message.content == "Result: 18°C and sunny"
    assert second.choices[0].finish_reason == "stop"
    sent = upstream.requests_for(ANSWER)[1].body["messages"]
    issued = sent[-2]["tool_calls"][0]["id"]  # the upstream gets back the id it issued (issue 25), not the client's
    assert sent[-2]["role"] == "assistant" and issued.startswith("call_up") and issued != call.id
    assert sent[-2]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": call.function.arguments}
    assert sent[-1] == {"role": "tool", "tool_call_id": issued, "content": "18°C and sunny"}
    assert len(upstream.requests_for(REASONER)) == 1  # a round that only brings tool results skips the reasoner


def test_parallel_calls_are_contiguous(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Dify merges tool-call deltas by id: each call must be whole before the next one starts,
    even when the upstream interleaves the fragments of parallel calls."""
    calls = [ScriptedCall("get_weather", json.dumps({"city": city}), pieces=3) for city in ("Paris", "Rome", "Oslo")]
    upstream.script(ANSWER, Reply(tool_calls=calls, interleave_calls=True))
    raw = http.post("/v1/chat/completions", json={"model": "duet", "stream": True, "messages": QUESTION, "tools": [WEATHER]}).content
    deltas = [c["choices"][0]["delta"] for c in sse_events(raw)[:-1] if c["choices"]]
    tool_deltas = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    rebuilt: list[dict[str, Any]] = []
    for piece in tool_deltas:
        if "id" in piece:
            assert piece["type"] == "function" and piece["function"]["name"] == "get_weather" and piece["function"]["arguments"] == ""
            assert piece["index"] == len(rebuilt)
            rebuilt.append({"id": piece["id"], "arguments": ""})
        else:
            assert piece["index"] == len(rebuilt) - 1  # a fragment always belongs to the latest call
            rebuilt[-1]["arguments"] += piece["function"]["arguments"]
    assert [json.loads(c["arguments"]) for c in rebuilt] == [{"city": "Paris"}, {"city": "Rome"}, {"city": "Oslo"}]
    assert len({c["id"] for c in rebuilt}) == 3


def test_parallel_calls_with_the_sdk(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    calls = [ScriptedCall("get_weather", json.dumps({"city": city})) for city in ("Paris", "Rome")]
    upstream.script(ANSWER, Reply(tool_calls=calls))
    completion = sdk.chat.completions.create(model="duet", messages=QUESTION, tools=[WEATHER])
    assert [json.loads(c.function.arguments)["city"] for c in completion.choices[0].message.tool_calls] == ["Paris", "Rome"]
    assert completion.choices[0].message.content is None
    assert completion.choices[0].finish_reason == "tool_calls"

    upstream.script(ANSWER, answer_with_result)
    history = [
        *QUESTION,
        completion.choices[0].message.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": c.id, "content": f"{i}°C"} for i, c in enumerate(completion.choices[0].message.tool_calls)),
    ]
    final = sdk.chat.completions.create(model="duet", messages=history, tools=[WEATHER])
    assert final.choices[0].message.content == "Result: 0°C / 1°C"


def test_names_a_model_cannot_use_get_aliases_mapped_back(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    long_name = "x" * 70
    tools = [tool("kb.search"), tool("天气查询"), tool(long_name), tool("plain_name")]
    tools[3]["function"]["parameters"]["properties"]["query"].update({"default": None, "enum": ["a", None], "x-extra": {"k": None}})
    alias_of: dict[str, str] = {}

    def call_every_tool(body: dict[str, Any]) -> Reply:
        for sent, original in zip(body["tools"], tools, strict=True):
            alias_of[original["function"]["name"]] = sent["function"]["name"]
        return Reply(tool_calls=[ScriptedCall(t["function"]["name"], '{"query": "q"}') for t in body["tools"]])

    upstream.script(ANSWER, call_every_tool)
    completion = http.post("/v1/chat/completions", json={"model": "duet", "messages": QUESTION, "tools": tools}).json()
    returned = [c["function"]["name"] for c in completion["choices"][0]["message"]["tool_calls"]]
    assert returned == ["kb.search", "天气查询", long_name, "plain_name"]
    assert all(VALID_NAME.match(alias) for alias in alias_of.values())
    assert alias_of["plain_name"] == "plain_name" and len(set(alias_of.values())) == 4

    # The schemas reach the model untouched (only the name is aliased), key order included.
    sent_tools = upstream.requests_for(ANSWER)[0].body["tools"]
    for sent, original in zip(sent_tools, tools, strict=True):
        assert json.dumps(sent["function"]["parameters"]) == json.dumps(original["function"]["parameters"])
        assert sent["function"]["description"] == original["function"]["description"]

    # Next round: the history names the client's tools; the model sees the same aliases again.
    upstream.script(ANSWER, answer_with_result)
    calls = completion["choices"][0]["message"]["tool_calls"]
    history = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": calls}]
    history += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    http.post("/v1/chat/completions", json={"model": "duet", "messages": history, "tools": tools})
    sent = upstream.requests_for(ANSWER)[1].body["messages"]
    assert [c["function"]["name"] for c in sent[-5]["tool_calls"]] == [alias_of[t["function"]["name"]] for t in tools]


def test_follow_up_rounds_as_dify_sends_them(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Think blocks in assistant content, results without ``name``, ids nobody here issued,
    earlier rounds rebuilt, and a last round without the ``tools`` key."""
    upstream.script(ANSWER, answer_with_result)
    history = [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "<think>\nI should look it up.\n</think>Let me check.",
         "tool_calls": [{"id": "chatcmpl-tool-abc123", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "content": "18°C", "tool_call_id": "chatcmpl-tool-abc123"},
        {"role": "assistant", "content": "<think>ok</think>It is 18°C. Anything else?"},
        {"role": "user", "content": "And Rome?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "fresh-id-1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "content": "21°C", "tool_call_id": "fresh-id-1"},
    ]
    completion = http.post("/v1/chat/completions", json={"model": "duet", "messages": history})  # no "tools" key
    assert completion.status_code == 200, completion.text
    assert completion.json()["choices"][0]["message"]["content"] == "Result: 18°C / 21°C"
    body = upstream.requests_for(ANSWER)[0].body
    assert "tools" not in body
    messages = body["messages"]
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("You are a weather bot.")
    assert messages[2] == {
        "role": "assistant", "content": "Let me check.",
        "tool_calls": [{"id": "chatcmpl-tool-abc123", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}],
    }
    assert messages[4] == {"role": "assistant", "content": "It is 18°C. Anything else?"}
    assert messages[3] == {"role": "tool", "tool_call_id": "chatcmpl-tool-abc123", "content": "18°C"}
    assert messages[-1] == {"role": "tool", "tool_call_id": "fresh-id-1", "content": "21°C"}
    assert not any("<think>" in (m.get("content") or "") for m in messages)


def test_reasoner_knows_the_tools(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    http.post("/v1/chat/completions", json={"model": "duet", "messages": QUESTION, "tools": [WEATHER]})
    reasoner = upstream.requests_for(REASONER)[0].body
    assert "tools" not in reasoner  # it plans; it does not call
    system = reasoner["messages"][0]["content"]
    assert "get_weather" in system and "Current weather for a city." in system and '"city"' in system


def test_reasoner_thinks_again_on_tool_results_when_configured(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    history = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18°C"}]
    http.post("/v1/chat/completions", json={"model": "duet-rethink", "messages": history, "tools": [WEATHER]})
    [reasoner] = upstream.requests_for(REASONER)
    transcript = "\n".join(m["content"] for m in reasoner.body["messages"])
    assert "[called tool get_weather with {}]" in transcript and "18°C" in transcript
    assert [m["role"] for m in reasoner.body["messages"]] == ["system", "user", "assistant", "user"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("none", "none"),
        ("auto", "auto"),
        ("required", "required"),
        ({"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "get_weather"}}),
        ({"type": "function", "function": {"name": "kb.search"}}, None),  # aliased below
    ],
)
def test_tool_choice_reaches_the_answer_model(http: httpx.Client, upstream: ScriptedUpstream, choice: Any, expected: Any) -> None:
    tools = [WEATHER, tool("kb.search")]
    body = {"model": "duet", "messages": QUESTION, "tools": tools, "tool_choice": choice, "parallel_tool_calls": False}
    assert http.post("/v1/chat/completions", json=body).status_code == 200
    sent = upstream.requests_for(ANSWER)[0].body
    if expected is None:
        alias = sent["tools"][1]["function"]["name"]
        expected = {"type": "function", "function": {"name": alias}}
    assert sent["tool_choice"] == expected
    assert sent["parallel_tool_calls"] is False


def test_named_tool_choice_must_name_a_tool(http: httpx.Client) -> None:
    body = {"model": "duet", "messages": QUESTION, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tool_choice"


def test_legacy_functions_mode(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Dify's "Function Call" mode: ``functions`` in, ``function_call`` out, ``role: function`` back."""
    functions = [WEATHER["function"]]
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}'), ScriptedCall("get_weather", "{}")]))
    completion = http.post("/v1/chat/completions", json={"model": "duet", "messages": QUESTION, "functions": functions}).json()
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "function_call"
    assert choice["message"]["function_call"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert "tool_calls" not in choice["message"]
    sent = upstream.requests_for(ANSWER)[0].body
    assert sent["tools"] == [WEATHER] and sent["parallel_tool_calls"] is False

    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("get_weather", '{"city": "Rome"}')]))
    raw = http.post("/v1/chat/completions", json={"model": "duet", "stream": True, "messages": QUESTION, "functions": functions}).content
    chunks = [c for c in sse_events(raw)[:-1] if c["choices"]]
    calls = [c["choices"][0]["delta"]["function_call"] for c in chunks if "function_call" in c["choices"][0]["delta"]]
    assert calls[0]["name"] == "get_weather" and "".join(c.get("arguments", "") for c in calls) == '{"city": "Rome"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "function_call"

    upstream.script(ANSWER, answer_with_result)
    history = [*QUESTION, {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
               {"role": "function", "name": "tool_call_id", "content": "21°C"}]
    final = http.post("/v1/chat/completions", json={"model": "duet", "messages": history, "functions": functions}).json()
    assert final["choices"][0]["message"]["content"] == "Result: 21°C"


def test_requests_never_see_each_others_tools(http: httpx.Client, duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """Concurrent requests, each with its own tools: each answer call lists only its own."""
    upstream.set_default(lambda body: Reply(content=["ok"], delay=0.3 if "r1" not in body["model"] else 0.0))
    results: dict[str, int] = {}

    def ask(name: str) -> None:
        with httpx.Client(base_url=duet.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
            body = {"model": "duet", "messages": [{"role": "user", "content": name}], "tools": [tool(f"tool_{name}")]}
            results[name] = client.post("/v1/chat/completions", json=body).status_code

    threads = [threading.Thread(target=ask, args=(f"r{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(results.values()) == {200}
    answer_calls = upstream.requests_for(ANSWER)
    assert len(answer_calls) == 6
    for call in answer_calls:
        asked = users_words(call.body["messages"][-1]["content"])
        assert [t["function"]["name"] for t in call.body["tools"]] == [f"tool_{asked}"]
