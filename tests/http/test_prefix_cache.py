"""A cacheable prompt (issue 26), over real HTTP: the answer model's request on each turn begins with
the previous turn's request, byte for byte (its messages), so a provider's prompt cache can hit.

The reasoning of each user turn follows that turn's message (a note kept in the store under the
conversation's prefix, put back on the next turns); a reasoner that thinks again on tool results
(``reason_on_tool_results: true``) has its note follow those results, and it stays there on the next
turns; the system message stays the same every turn.
"""

from __future__ import annotations

import itertools
from typing import Any

import anthropic
import httpx

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, tool
from tests.prefix_shares import messages_bytes, prefix_share
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

WEATHER = tool("get_weather", "Current weather for a city.", {"city": {"type": "string"}})


def assistant_turn(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message as a client sends it back (no reasoning)."""
    turn: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        turn["tool_calls"] = message["tool_calls"]
    return turn


def test_each_answer_request_starts_with_the_previous_one(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a weather bot."}]

    def ask(text: str | None, reasoning: str | None, reply: Reply) -> dict[str, Any]:
        if text is not None:
            history.append({"role": "user", "content": text})
        if reasoning is not None:
            upstream.script(REASONER, Reply(reasoning=[reasoning]))
        upstream.script(ANSWER, reply)
        response = http.post("/v1/chat/completions", json={"model": "duet", "messages": history, "tools": [WEATHER]})
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        history.append(assistant_turn(message))
        return message

    called = ask("Weather in Paris?", "Call get_weather for Paris.", Reply(tool_calls=[ScriptedCall("get_weather", '{"city":"Paris"}')]))
    history.append({"role": "tool", "tool_call_id": called["tool_calls"][0]["id"], "content": "18°C"})
    ask(None, None, Reply(content=["It is 18°C in Paris."]))
    ask("And in Rome?", "Rome: I know it is warm; no tool needed.", Reply(content=["Warm, probably."]))
    ask("Thanks!", "Say you are welcome.", Reply(content=["You are welcome."]))
    ask("Bye.", "Say goodbye.", Reply(content=["Goodbye!"]))

    requests = [messages_bytes(r.body) for r in upstream.requests_for(ANSWER)]
    assert len(requests) == 5
    shares = [prefix_share(a, b) for a, b in itertools.pairwise(requests)]
    assert all(share == 1.0 for share in shares), shares  # every earlier request is a prefix of the next, whole
    system = upstream.requests_for(ANSWER)[-1].body["messages"][0]["content"]
    assert "Say goodbye." not in system  # the reasoning is not in the system message
    reasoner_requests = [messages_bytes(r.body) for r in upstream.requests_for(REASONER)]
    assert [prefix_share(a, b) for a, b in itertools.pairwise(reasoner_requests)] == [1.0] * 3


def test_notes_after_tool_results_stay_where_they_were(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """A reasoner that thinks again on each round of tool results: its note follows the results, and
    the next requests (the next round of the same turn, the next user turns) keep it there."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a weather bot."}]

    def ask(reasoning: str, reply: Reply) -> dict[str, Any]:
        upstream.script(REASONER, Reply(reasoning=[reasoning]))
        upstream.script(ANSWER, reply)
        response = http.post("/v1/chat/completions", json={"model": "duet-rethink", "messages": history, "tools": [WEATHER]})
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        history.append(assistant_turn(message))
        return message

    def results(message: dict[str, Any], text: str) -> None:
        history.append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": text})

    history.append({"role": "user", "content": "Weather in Paris, then in Rome?"})
    called = ask("Paris first.", Reply(tool_calls=[ScriptedCall("get_weather", '{"city":"Paris"}')]))
    results(called, "18°C")
    called = ask("Paris is 18°C; now Rome.", Reply(tool_calls=[ScriptedCall("get_weather", '{"city":"Rome"}')]))
    results(called, "24°C")
    ask("Both known: compare them.", Reply(content=["Paris 18°C, Rome 24°C."]))
    history.append({"role": "user", "content": "Thanks!"})
    ask("Say you are welcome.", Reply(content=["You are welcome."]))

    bodies = [r.body for r in upstream.requests_for(ANSWER)]
    requests = [messages_bytes(body) for body in bodies]
    assert [prefix_share(a, b) for a, b in itertools.pairwise(requests)] == [1.0] * 3
    roles = [(m["role"], m["content"].split("<reasoning>\n")[-1][:12] if m["role"] == "user" and m["content"] else None)
             for m in bodies[-1]["messages"][1:]]
    assert roles == [("user", "Paris first."), ("assistant", None), ("tool", None), ("user", "Paris is 18°"),
                     ("assistant", None), ("tool", None), ("user", "Both known: "), ("assistant", None), ("user", "Say you are ")]


def test_notes_after_tool_results_stay_where_they_were_on_messages(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """The same on /v1/messages with the anthropic SDK (Claude Code's client): tool_result blocks, then the next turn."""
    history: list[dict[str, Any]] = []
    tools = [{"name": "get_weather", "description": "Current weather for a city.",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    with anthropic.Anthropic(base_url=duet.base_url, api_key=API_KEY, max_retries=0, timeout=30) as claude:
        def ask(reasoning: str, reply: Reply) -> str | None:
            upstream.script(REASONER, Reply(reasoning=[reasoning]))
            upstream.script(ANSWER, reply)
            message = claude.messages.create(model="duet-rethink", max_tokens=256, system="You are a weather bot.",
                                             tools=tools, messages=history)  # type: ignore[arg-type]
            content = [block.model_dump(exclude_none=True) for block in message.content if block.type != "thinking"]
            history.append({"role": "assistant", "content": content})
            return next((block["id"] for block in content if block["type"] == "tool_use"), None)

        history.append({"role": "user", "content": "Weather in Paris, then in Rome?"})
        call = ask("Paris first.", Reply(tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}')]))
        history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": "18°C"}]})
        call = ask("Now Rome.", Reply(tool_calls=[ScriptedCall("get_weather", '{"city": "Rome"}')]))
        history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": "24°C"}]})
        ask("Compare them.", Reply(content=["Rome is warmer."]))
        history.append({"role": "user", "content": "Thanks!"})
        ask("Say you are welcome.", Reply(content=["You are welcome."]))

    requests = [messages_bytes(r.body) for r in upstream.requests_for(ANSWER)]
    assert [prefix_share(a, b) for a, b in itertools.pairwise(requests)] == [1.0] * 3
    notes = [m["content"] for m in upstream.requests_for(ANSWER)[-1].body["messages"] if m["role"] == "user"]
    assert [note.split("<reasoning>\n")[-1].split("\n")[0] for note in notes] == [
        "Paris first.", "Now Rome.", "Compare them.", "Say you are welcome."]
