"""A thinking answer model in tool loops: its own reasoning on each tool-calling turn goes back to it.

The scripted upstream plays DeepSeek's thinking mode (``require_reasoning_back``): a request whose
assistant tool-call message lacks its reasoning is refused with HTTP 400 "Missing `reasoning_content`
field in the assistant message". Duet keeps the reasoning inside its service-tool loop, across client
rounds (with the hidden part of the round), rebuilds it from ``<think>`` text when the stored round is
gone, and reads every spelling of reasoning an upstream uses.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from duet.agents._answer_agent import ANSWER_REASONING_LABEL
from duet.agents._model_reasoning import REASONING_NOT_KEPT
from tests.conftest import API_KEY, REASONER, THINKING_ANSWER, DuetServer, sse_events, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

SEARCH = tool("web_search", "Search the web.")
QUESTION = [{"role": "user", "content": "Who is a@b.c?"}]


def tool_turns(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The assistant tool-call messages of a request to the model."""
    return [m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]


def post(http: httpx.Client, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """A completion, streamed or not, as one message: reasoning, content, tool calls, usage."""
    reply = http.post("/v1/chat/completions", json={**body, "stream": stream, "stream_options": {"include_usage": True} if stream else None})
    assert reply.status_code == 200, reply.text
    if not stream:
        choice = reply.json()["choices"][0]
        return {**choice["message"], "finish_reason": choice["finish_reason"], "usage": reply.json()["usage"]}
    chunks = [event for event in sse_events(reply.content) if event != "[DONE]"]
    assert not any("error" in chunk for chunk in chunks), chunks
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    calls: list[dict[str, Any]] = []
    for delta in deltas:
        for call in delta.get("tool_calls", []):
            if call.get("id"):
                calls.append({"id": call["id"], "type": "function", "function": {"name": call["function"]["name"], "arguments": ""}})
            calls[-1]["function"]["arguments"] += call["function"]["arguments"]
    return {
        "reasoning_content": "".join(d.get("reasoning_content", "") for d in deltas),
        "content": "".join(d.get("content") or "" for d in deltas),
        "tool_calls": calls or None,
        "finish_reason": [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1],
        "usage": chunks[-1]["usage"],
    }


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "reasoning_details"])
def test_service_tool_loop_sends_the_reasoning_back(http: httpx.Client, upstream: ScriptedUpstream, field: str, stream: bool) -> None:
    """Inside Duet's own loop: the second call carries the first call's reasoning, in the field the
    upstream used; the client sees the answer model's reasoning after the reasoner's, marked."""
    upstream.require_reasoning_back(THINKING_ANSWER, field)
    upstream.script(REASONER, Reply(reasoning=["Look the customer up."]))
    upstream.script(THINKING_ANSWER,
                    Reply(reasoning=["I need ", "the customer."], reasoning_field=field,
                          tool_calls=[ScriptedCall("lookup_customer", '{"email": "a@b.c"}')]),
                    Reply(reasoning=["Found Ada."], reasoning_field=field, content=["It is Ada."], usage=(50, 9)))
    message = post(http, {"model": "duet-thinking", "messages": QUESTION}, stream)
    assert message["content"] == "It is Ada."
    _first, second = upstream.requests_for(THINKING_ANSWER)
    [turn] = tool_turns(second.body)
    if field == "reasoning_details":  # OpenRouter's details go back whole, fragments joined, signature kept
        assert turn["reasoning_details"] == [{"type": "reasoning.text", "text": "I need the customer.", "index": 0, "format": "unknown",
                                              "signature": "sig-scripted"}]
    else:
        assert turn[field] == "I need the customer."
    reasoning = message["reasoning_content"]
    assert reasoning.startswith("Look the customer up.\n\n" + ANSWER_REASONING_LABEL + "I need the customer.")
    assert reasoning.endswith(ANSWER_REASONING_LABEL + "Found Ada.")
    # Reasoning tokens: the reasoner's completion tokens (1: all it writes is reasoning), then what the
    # answer model's upstream reported for its two calls (2 and 1).
    assert message["usage"]["completion_tokens_details"] == {"reasoning_tokens": 1 + 2 + 1}


@pytest.mark.parametrize("stream", [True, False])
def test_client_round_keeps_the_reasoning_with_the_hidden_part(http: httpx.Client, upstream: ScriptedUpstream, stream: bool) -> None:
    """A service call and a client call in two rounds; the follow-up with the client's result sends
    both tool turns back with their own reasoning (restored from the continuation store)."""
    upstream.require_reasoning_back(THINKING_ANSWER)
    upstream.script(THINKING_ANSWER,
                    Reply(reasoning=["First the customer."], tool_calls=[ScriptedCall("lookup_customer", '{"email": "a@b.c"}')]),
                    Reply(reasoning=["Now search the web."], tool_calls=[ScriptedCall("web_search", '{"query": "Ada"}')]))
    first = post(http, {"model": "duet-thinking", "messages": QUESTION, "tools": [SEARCH]}, stream)
    [call] = first["tool_calls"]
    assert call["function"]["name"] == "web_search" and first["finish_reason"] == "tool_calls"

    upstream.script(THINKING_ANSWER, Reply(reasoning=["Both agree."], content=["Ada, a mathematician."]))
    follow_up = [*QUESTION, {"role": "assistant", "content": first["content"] or None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": "Ada Lovelace, mathematician."}]
    second = post(http, {"model": "duet-thinking", "messages": follow_up, "tools": [SEARCH]}, stream)
    assert second["content"] == "Ada, a mathematician."
    turns = tool_turns(upstream.requests_for(THINKING_ANSWER)[-1].body)
    assert [t["reasoning_content"] for t in turns] == ["First the customer.", "Now search the web."]
    assert len(upstream.requests_for(REASONER)) == 1  # the round's reasoning was restored too (reason_on_tool_results: auto)


def test_reasoning_is_rebuilt_from_think_text_when_the_state_is_gone(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Dify's history: fresh call ids, the reasoning only as <think> text in the content."""
    upstream.require_reasoning_back(THINKING_ANSWER)
    upstream.script(THINKING_ANSWER, Reply(reasoning=["Seen."], content=["Ada."]))
    history = [*QUESTION,
               {"role": "assistant", "content": "<think>\nSearch for the address.\n</think>Searching.",
                "tool_calls": [{"id": "fresh-1", "type": "function", "function": {"name": "web_search", "arguments": '{"query": "a@b.c"}'}}]},
               {"role": "tool", "tool_call_id": "fresh-1", "content": "Ada"}]
    reply = http.post("/v1/chat/completions", json={"model": "duet-thinking", "messages": history, "tools": [SEARCH]})
    assert reply.status_code == 200, reply.text
    [turn] = tool_turns(upstream.requests_for(THINKING_ANSWER)[-1].body)
    assert turn["reasoning_content"] == "Search for the address." and turn["content"] == "Searching."


def test_a_model_not_yet_seen_thinking_is_asked_again_with_its_reasoning(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """auto, on a model that has produced no reasoning yet in this process and a turn whose
    reasoning is unknown: the upstream's 400 for want of reasoning makes Duet ask once more, with a
    note in place of the lost reasoning (never an empty field)."""
    cold = THINKING_ANSWER + "-cold"
    upstream.require_reasoning_back(cold)
    upstream.script(cold, Reply(reasoning=["Seen."], content=["Ada."]))
    history = [*QUESTION,
               {"role": "assistant", "content": "", "tool_calls": [{"id": "fresh-2", "type": "function",
                                                                   "function": {"name": "web_search", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "fresh-2", "content": "Ada"}]
    reply = http.post("/v1/chat/completions", json={"model": "duet-thinking-cold", "messages": history, "tools": [SEARCH]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "Ada."
    refused, accepted = upstream.requests_for(cold)
    assert "reasoning_content" not in tool_turns(refused.body)[0]
    assert tool_turns(accepted.body)[0]["reasoning_content"] == REASONING_NOT_KEPT


def test_pass_reasoning_back_false_sends_none(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Off: the model's reasoning never goes back (and a model that needs it refuses, as it says)."""
    upstream.require_reasoning_back(THINKING_ANSWER)
    upstream.script(THINKING_ANSWER, Reply(reasoning=["I need the customer."], tool_calls=[ScriptedCall("lookup_customer", '{"email": "a@b.c"}')]))
    reply = http.post("/v1/chat/completions", json={"model": "duet-thinking-off", "messages": QUESTION})
    assert reply.status_code == 400 and "Missing `reasoning_content` field" in reply.json()["error"]["message"]
    assert "reasoning_content" not in tool_turns(upstream.requests_for(THINKING_ANSWER)[-1].body)[0]


def test_openai_sdk_round_trip_with_reasoning_sent_back_by_the_client(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """A client that follows DeepSeek's guide sends reasoning_content back itself: it is used as sent."""
    sdk = openai.OpenAI(base_url=f"{duet.base_url}/v1", api_key=API_KEY, max_retries=0)
    upstream.require_reasoning_back(THINKING_ANSWER)
    upstream.script(THINKING_ANSWER, Reply(content=["Ada."]))
    history = [*QUESTION,
               {"role": "assistant", "content": None, "reasoning_content": "My own notes.",
                "tool_calls": [{"id": "sdk-1", "type": "function", "function": {"name": "web_search", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "sdk-1", "content": "Ada"}]
    completion = sdk.chat.completions.create(model="duet-thinking", messages=history, tools=[SEARCH])  # type: ignore[arg-type]
    assert completion.choices[0].message.content == "Ada."
    assert tool_turns(upstream.requests_for(THINKING_ANSWER)[-1].body)[0]["reasoning_content"] == "My own notes."
    assert json.loads(completion.model_dump_json())["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
