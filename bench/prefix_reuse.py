"""Prefix reuse of the answer model's prompt (issue 26): the share of each request's bytes (its
messages, as the upstream receives them) that the next turn's request starts with, over a 10-turn
conversation with client tool rounds on all three protocols, once with the default reasoner and once
with one that thinks again on every round of tool results (``reason_on_tool_results: true``); and, for a Claude-Code-sized conversation
(200 messages, 40 tools, on ``/v1/messages``), the prompt tokens each new turn must prefill (what is
not a byte prefix of the previous request, at 4 characters a token).

A provider's prompt cache (OpenAI, DeepSeek, Anthropic, vLLM's prefix cache) only serves a byte-exact
prefix: what is not one is prefilled again, every turn. Run it with this checkout and with another
(``--duet``, as ``bench/reasoning_once.py``)::

    .venv/bin/python bench/prefix_reuse.py --label after
    .venv/bin/python bench/prefix_reuse.py --label before --duet "/tmp/before/.venv/bin/python -m duet.api"
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import httpx

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after this script's folder: tests/

from harness import DUET, stop
from reasoning_once import ANSWER, REASONER, serve
from record import begin, save
from tests.prefix_shares import common_prefix, messages_bytes, shares
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

TURNS = 10
WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


class Chat:
    path = "/v1/chat/completions"

    def __init__(self, model: str = "once") -> None:
        self.model = model
        self.history: list[dict[str, Any]] = [{"role": "system", "content": "You are a weather bot."}]

    def user(self, text: str) -> None:
        self.history.append({"role": "user", "content": text})

    def body(self) -> dict[str, Any]:
        return {"model": self.model, "messages": self.history, "tools": [{"type": "function", "function": WEATHER}]}

    def took(self, reply: dict[str, Any]) -> str | None:
        message = reply["choices"][0]["message"]
        turn: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            turn["tool_calls"] = message["tool_calls"]
        self.history.append(turn)
        return message["tool_calls"][0]["id"] if message.get("tool_calls") else None

    def result(self, call_id: str, text: str) -> None:
        self.history.append({"role": "tool", "tool_call_id": call_id, "content": text})


class Messages(Chat):
    path = "/v1/messages"

    def __init__(self, model: str = "once") -> None:
        self.model = model
        self.history = []

    def body(self) -> dict[str, Any]:
        return {"model": self.model, "max_tokens": 500, "system": "You are a weather bot.", "messages": self.history,
                "tools": [{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}]}

    def took(self, reply: dict[str, Any]) -> str | None:
        content = [block for block in reply["content"] if block["type"] != "thinking"]
        self.history.append({"role": "assistant", "content": content})
        return next((block["id"] for block in content if block["type"] == "tool_use"), None)

    def result(self, call_id: str, text: str) -> None:
        self.history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}]})


class Responses(Chat):
    path = "/v1/responses"

    def __init__(self, model: str = "once") -> None:
        self.model = model
        self.history = []

    def user(self, text: str) -> None:
        self.history.append({"role": "user", "content": text})

    def body(self) -> dict[str, Any]:
        return {"model": self.model, "instructions": "You are a weather bot.", "input": self.history, "store": False,
                "tools": [{"type": "function", **WEATHER}]}

    def took(self, reply: dict[str, Any]) -> str | None:
        call_id = None
        for item in reply["output"]:
            if item["type"] == "message":
                self.history.append({"role": "assistant", "content": item["content"][0]["text"]})
            elif item["type"] == "function_call":
                self.history.append({k: item[k] for k in ("type", "call_id", "name", "arguments")})
                call_id = item["call_id"]
        return call_id

    def result(self, call_id: str, text: str) -> None:
        self.history.append({"type": "function_call_output", "call_id": call_id, "output": text})


def conversation(http: httpx.Client, upstream: ScriptedUpstream, protocol: Chat) -> dict[str, Any]:
    """Ten user turns, every third with client tool rounds (one; two when the reasoner thinks again on
    each round's results, pipeline ``rethink``); the answer model's and the reasoner's requests' prefix shares."""
    upstream.reset()
    rethinking = protocol.model == "rethink"
    for turn in range(TURNS):
        # Each protocol its own questions: the same conversation again would reuse its reasoning (reasoner.reuse_seconds).
        protocol.user(f"Turn {turn} ({protocol.path}, {protocol.model}): what about the weather in city number {turn}?")
        rounds = (2 if rethinking else 1) if turn % 3 == 0 else 0
        upstream.script(REASONER, Reply(reasoning=[f"Plan for turn {turn}: ", "check the forecast, answer briefly. " * 8]))
        for tool_round in range(rounds + 1):
            if tool_round and rethinking:
                upstream.script(REASONER, Reply(reasoning=[f"Round {tool_round} of turn {turn}: ", "the result is in, go on. " * 8]))
            upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("get_weather", json.dumps({"city": f"city {turn}.{tool_round}"}))])
                            if tool_round < rounds else Reply(content=[f"It is {15 + turn}°C in city {turn}."]))
            call_id = protocol.took(http.post(protocol.path, json=protocol.body()).raise_for_status().json())
            if tool_round < rounds and call_id is not None:
                protocol.result(call_id, f"{15 + turn}°C, sunny")
    answer = shares([messages_bytes(r.body) for r in upstream.requests_for(ANSWER)])
    reasoner = shares([messages_bytes(r.body) for r in upstream.requests_for(REASONER)])
    return {"answer_requests": len(answer) + 1, "reasoner_requests": len(reasoner) + 1, "answer_min": min(answer),
            "answer_mean": round(statistics.mean(answer), 4), "reasoner_min": min(reasoner),
            "reasoner_mean": round(statistics.mean(reasoner), 4), "answer_shares": answer}


def claude_code_sized(http: httpx.Client, upstream: ScriptedUpstream) -> dict[str, Any]:
    """200 messages and 40 tools on /v1/messages, then 3 more turns: the tokens each turn prefills."""
    upstream.reset()
    tools = [{"name": f"tool_{i}", "description": f"Tool number {i}, which does thing {i}. " * 4,
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}}}
             for i in range(40)]
    history: list[dict[str, Any]] = []
    for i in range(100):
        history.append({"role": "user", "content": f"Step {i}: please change line {i} of the file. " + "Context. " * 40})
        history.append({"role": "assistant", "content": f"Done with step {i}. " + "Explanation. " * 30})
    prefilled: list[int] = []
    previous: bytes | None = None
    for turn in range(4):
        history.append({"role": "user", "content": f"Next change, number {turn}. " + "Context. " * 40})
        upstream.script(REASONER, Reply(reasoning=[f"Plan change {turn}: ", "edit, then test. " * 30]))
        upstream.script(ANSWER, Reply(content=[f"Changed ({turn})."]))
        reply = http.post("/v1/messages", json={"model": "once", "max_tokens": 500, "system": "You are a coding agent.",
                                                "messages": history, "tools": tools}).raise_for_status().json()
        history.append({"role": "assistant", "content": [b for b in reply["content"] if b["type"] == "text"]})
        current = messages_bytes(upstream.requests_for(ANSWER)[-1].body)
        if previous is not None:
            prefilled.append((len(current) - common_prefix(previous, current)) // 4)
        previous = current
    return {"messages": 201, "tools": 40, "prompt_tokens_per_turn": len(previous or b"") // 4, "prefilled_tokens_per_turn": prefilled}


def measure(duet: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with ScriptedUpstream() as upstream, tempfile.TemporaryDirectory() as directory:
        process, base = serve(duet, upstream, Path(directory), rethink=True)
        try:
            with httpx.Client(base_url=base, timeout=60, headers={"x-api-key": "bench", "anthropic-version": "2023-06-01"}) as http:
                makers: dict[str, Callable[[str], Chat]] = {"chat": Chat, "responses": Responses, "messages": Messages}
                for model, suffix in (("once", ""), ("rethink", " rethinking")):
                    for name, make in makers.items():
                        figures[name + suffix] = conversation(http, upstream, make(model))
                        print(name + suffix, {k: v for k, v in figures[name + suffix].items() if k != "answer_shares"}, flush=True)
                figures["claude_code_sized"] = claude_code_sized(http, upstream)
                print("claude-code-sized", figures["claude_code_sized"], flush=True)
        finally:
            stop(process)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duet", default=DUET, help="the command that runs duet (default: this checkout's console script)")
    parser.add_argument("--label", default="")
    options = parser.parse_args()
    run = begin("prefix_reuse")
    save(run, measure(options.duet), options={"duet": options.duet, "turns": TURNS}, label=options.label)


if __name__ == "__main__":
    main()
