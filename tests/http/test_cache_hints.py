"""Prompt-cache hints over real HTTP (issue 26): the client's ``cache_control`` marks reach an answer
model whose upstream takes them (``cache_marks: on``, as OpenRouter's and Alibaba's are by default),
each on the block the client put it on, whatever Duet adds after it; an upstream that does not take
them (the default for any other host) gets none. The reasoner gets a ``prompt_cache_key`` of its own
where its upstream takes one (``cache_key: on``, as OpenAI's is by default), the same on every turn of
a conversation.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import anthropic
import httpx
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

EPHEMERAL = {"type": "ephemeral"}
WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def claude(duet: DuetServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=duet.base_url, api_key=API_KEY, max_retries=0, timeout=30) as sdk:
        yield sdk


def marked(body: dict[str, Any]) -> list[tuple[str, str]]:
    """Every marked part of a request: (role, the part's text), and ('tools', name) for a marked tool."""
    found = [(message["role"], part["text"]) for message in body["messages"] if isinstance(message["content"], list)
             for part in message["content"] if "cache_control" in part]
    return found + [("tools", entry["function"]["name"]) for entry in body.get("tools", []) if "cache_control" in entry]


def claude_code_turn(claude: anthropic.Anthropic, upstream: ScriptedUpstream, model: str) -> dict[str, Any]:
    """A Claude-Code-shaped follow-up: marks on the last system block, the tool, an earlier user
    message's last block and the latest tool_result; the answer model's request."""
    upstream.script(REASONER, Reply(reasoning=["Answer from the result."]))
    upstream.script(ANSWER, Reply(content=["It is 18°C."]))
    claude.messages.create(
        model=model, max_tokens=256,
        system=[{"type": "text", "text": "You are Claude Code."},
                {"type": "text", "text": "Work in /repo.", "cache_control": EPHEMERAL}],
        tools=[{**WEATHER, "cache_control": EPHEMERAL}],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Context. "},
                                         {"type": "text", "text": "Weather in Paris?", "cache_control": EPHEMERAL}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18°C",
                                          "cache_control": EPHEMERAL}]},
        ],
    )
    return upstream.requests_for(ANSWER)[-1].body


def test_claude_codes_marks_stay_on_the_blocks_it_marked(claude: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    body = claude_code_turn(claude, upstream, "duet-cache-hints")
    system = body["messages"][0]
    # The system prompt is Duet's preamble after the client's: the mark ends where the client's blocks end.
    assert system["content"][0]["text"].endswith("You are Claude Code.\n\nWork in /repo.") and "cache_control" in system["content"][0]
    assert "reasoning model" in system["content"][1]["text"] and "cache_control" not in system["content"][1]
    assert marked(body) == [("system", system["content"][0]["text"]), ("user", "Context. Weather in Paris?"), ("tool", "18°C"),
                            ("tools", "get_weather")]
    question = body["messages"][1]
    assert question["role"] == "user" and question["content"][0]["cache_control"] == EPHEMERAL
    assert all(part.get("type") == "text" for part in question["content"])
    assert [json.dumps(m, ensure_ascii=False) for m in body["messages"][2:4]][1] == (
        '{"role": "tool", "tool_call_id": "toolu_01", "content": [{"type": "text", "text": "18°C", "cache_control": {"type": "ephemeral"}}]}')


def test_an_upstream_that_does_not_take_marks_gets_none(claude: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    body = claude_code_turn(claude, upstream, "duet")
    assert "cache_control" not in json.dumps(body)
    assert all(isinstance(message.get("content"), (str, type(None))) for message in body["messages"])


def test_marks_do_not_change_the_prompts_bytes_where_they_are_dropped(claude: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    """The client moves its marks every turn: where they are not sent, the prompt is the same without them."""
    with_marks = claude_code_turn(claude, upstream, "duet")["messages"]
    upstream.script(REASONER, Reply(reasoning=["Answer from the result."]))
    upstream.script(ANSWER, Reply(content=["It is 18°C."]))
    claude.messages.create(
        model="duet", max_tokens=256, system="You are Claude Code.\n\nWork in /repo.", tools=[WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "Context. Weather in Paris?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18°C"}]}])
    assert upstream.requests_for(ANSWER)[-1].body["messages"] == with_marks


def test_chat_clients_openrouter_style_marks_are_kept(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Say hello."]))
    upstream.script(ANSWER, Reply(content=["Hello."]))
    weather = {**tool("get_weather", "Weather.", {"city": {"type": "string"}}), "cache_control": EPHEMERAL}
    response = http.post("/v1/chat/completions", json={"model": "duet-cache-hints", "tools": [weather], "messages": [
        {"role": "system", "content": [{"type": "text", "text": "HUGE TEXT BODY", "cache_control": EPHEMERAL}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": EPHEMERAL}]},
    ]})
    assert response.status_code == 200, response.text
    body = upstream.requests_for(ANSWER)[-1].body
    assert [role for role, _ in marked(body)] == ["system", "user", "tools"]
    assert body["messages"][0]["content"][0]["text"].endswith("HUGE TEXT BODY")
    assert body["messages"][1]["content"][0] == {"type": "text", "text": "Hi", "cache_control": EPHEMERAL}
    assert "<reasoning>" in body["messages"][1]["content"][1]["text"]  # Duet's note follows, unmarked


def test_responses_clients_marks_are_kept(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Say hello."]))
    upstream.script(ANSWER, Reply(content=["Hello."]))
    response = http.post("/v1/responses", json={"model": "duet-cache-hints", "store": False, "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "Be brief.", "cache_control": EPHEMERAL}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi", "cache_control": EPHEMERAL}]},
    ]})
    assert response.status_code == 200, response.text
    body = upstream.requests_for(ANSWER)[-1].body
    assert marked(body)[1] == ("user", "Hi") and marked(body)[0][0] == "system" and marked(body)[0][1].endswith("Be brief.")


def test_the_reasoner_gets_a_cache_key_of_its_own(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """The same key on every turn of a conversation, another for another conversation, another again
    when the client sent its own (which the answer model gets as it is)."""
    def ask(messages: list[dict[str, Any]], model: str = "duet-cache-hints", **extra: Any) -> tuple[Any, Any]:
        upstream.script(REASONER, Reply(reasoning=["Think."]))
        upstream.script(ANSWER, Reply(content=["Answer."]))
        response = http.post("/v1/chat/completions", json={"model": model, "messages": messages, **extra})
        assert response.status_code == 200, response.text
        return upstream.requests_for(REASONER)[-1].body.get("prompt_cache_key"), upstream.requests_for(ANSWER)[-1].body.get("prompt_cache_key")

    first, answer_key = ask([{"role": "user", "content": "Plan a trip."}])
    assert first is not None and first.startswith("duet-") and answer_key is None
    again, _ = ask([{"role": "user", "content": "Plan a trip."}, {"role": "assistant", "content": "Where to?"},
                    {"role": "user", "content": "Rome."}])
    other, _ = ask([{"role": "user", "content": "Write a poem."}])
    keyed, answer_key = ask([{"role": "user", "content": "Plan a trip."}], prompt_cache_key="user-42")
    assert again == first and other != first and keyed not in (first, "user-42") and answer_key == "user-42"
    assert ask([{"role": "user", "content": "Plan a trip."}], model="duet")[0] is None  # an upstream that does not take one


def test_marks_on_the_reasoner_side_never_reach_it(claude: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    """The reasoner's prompt is Duet's own: the client's marks are the answer model's only."""
    claude_code_turn(claude, upstream, "duet-cache-hints")
    assert "cache_control" not in json.dumps(upstream.requests_for(REASONER)[-1].body)


def test_marks_and_service_tool_rounds(claude: anthropic.Anthropic, upstream: ScriptedUpstream) -> None:
    """A tool round's follow-up on the answer model keeps the marks of the client's turn."""
    upstream.script(REASONER, Reply(reasoning=["Call the tool."]))
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}')]))
    reply = claude.messages.create(model="duet-cache-hints", max_tokens=256, tools=[WEATHER],  # type: ignore[list-item]
                                   messages=[{"role": "user", "content": [{"type": "text", "text": "Weather?", "cache_control": EPHEMERAL}]}])
    assert reply.stop_reason == "tool_use"
    assert marked(upstream.requests_for(ANSWER)[-1].body) == [("user", "Weather?")]
