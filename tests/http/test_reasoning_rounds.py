"""Reasoning on every round that needs it (``reason_on_tool_results``: ``auto``, ``true``, ``false``).

A round that only brings tool results continues a round that was answered with reasoning. With
``auto`` (the default) the reasoner is skipped when that reasoning is restored from the continuation
store, and thinks again when it is not: call ids Duet never issued (Dify rebuilds history with fresh
ids), or a stored round that is gone.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import ANSWER, REASONER, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

WEATHER = tool("get_weather", "Current weather for a city.", {"city": {"type": "string"}})
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


def reasoning_in(body: dict[str, Any]) -> str:
    """The reasoning the answer model was given (after the latest user message that carries one), or ''."""
    for message in reversed(body["messages"]):
        if message["role"] == "user" and isinstance(message["content"], str) and "<reasoning>\n" in message["content"]:
            return message["content"].rsplit("<reasoning>\n", 1)[1].split("\n</reasoning>", 1)[0]
    return ""


def notes_in(body: dict[str, Any]) -> list[str]:
    """Every reasoning note in the answer model's prompt, in order."""
    return [part.split("\n</reasoning>", 1)[0] for message in body["messages"] if message["role"] == "user"
            and isinstance(message["content"], str) for part in message["content"].split("<reasoning>\n")[1:]]


def follow_up(call_id: str, assistant_content: str = "") -> list[dict[str, Any]]:
    return [
        *QUESTION,
        {"role": "assistant", "content": assistant_content,
         "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "18°C"},
    ]


def first_round(http: httpx.Client, upstream: ScriptedUpstream, model: str) -> str:
    """A round answered with reasoning that ends in a client tool call; returns the call's id."""
    upstream.script(REASONER, Reply(reasoning=["Look ", "up the weather."]))
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}')]))
    first = http.post("/v1/chat/completions", json={"model": model, "messages": QUESTION, "tools": [WEATHER]})
    assert first.status_code == 200, first.text
    [call] = first.json()["choices"][0]["message"]["tool_calls"]
    return call["id"]


def continue_round(http: httpx.Client, upstream: ScriptedUpstream, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Sends a follow-up with the tool's result; returns the answer model's request."""
    upstream.script(ANSWER, Reply(content=["It is 18°C."]))
    reply = http.post("/v1/chat/completions", json={"model": model, "messages": messages, "tools": [WEATHER]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "It is 18°C."
    return upstream.requests_for(ANSWER)[-1].body


def test_auto_skips_the_reasoner_when_the_rounds_reasoning_is_restored(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    call_id = first_round(http, upstream, "duet")
    answer = continue_round(http, upstream, "duet", follow_up(call_id))
    assert len(upstream.requests_for(REASONER)) == 1  # only the first round thought
    assert reasoning_in(answer) == "Look up the weather."  # the stored reasoning, restored


def test_auto_thinks_again_for_call_ids_duet_never_issued(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Dify-style history: fresh call ids, the earlier reasoning only as <think> text in content."""
    upstream.script(REASONER, Reply(reasoning=["The tool said 18°C; ", "answer with it."]))
    history = follow_up("chatcmpl-tool-abc123", "<think>\nLook up the weather.\n</think>")
    answer = continue_round(http, upstream, "duet", history)
    [reasoner] = upstream.requests_for(REASONER)
    assert "[called tool get_weather with" in reasoner.body["messages"][-2]["content"] and "18°C" in reasoner.body["messages"][-1]["content"]
    assert reasoning_in(answer) == "The tool said 18°C; answer with it."


def test_auto_thinks_again_when_the_stored_round_is_gone(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """An id of Duet's form that the store does not hold (expired, or kept by another store)."""
    upstream.script(REASONER, Reply(reasoning=["Thinking again."]))
    answer = continue_round(http, upstream, "duet", follow_up("call_0123456789abcdef01234567"))
    assert len(upstream.requests_for(REASONER)) == 1
    assert reasoning_in(answer) == "Thinking again."


def test_false_never_thinks_again(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    answer = continue_round(http, upstream, "duet-never-rethink", follow_up("chatcmpl-tool-abc123"))
    assert upstream.requests_for(REASONER) == []
    assert reasoning_in(answer) == ""  # the round's reasoning is lost, and nobody thought again


def test_true_thinks_again_even_when_the_reasoning_is_restored(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    call_id = first_round(http, upstream, "duet-rethink")
    upstream.script(REASONER, Reply(reasoning=["Now with the result."]))
    answer = continue_round(http, upstream, "duet-rethink", follow_up(call_id))
    assert len(upstream.requests_for(REASONER)) == 2
    # The restored reasoning where it was (after the user's question), then the new one after the tool results.
    assert notes_in(answer) == ["Look up the weather.", "Now with the result."]
    assert answer["messages"][-1]["role"] == "user" and answer["messages"][-2]["role"] == "tool"
