"""Tries the current Duet against every replayed dialect and prints what fails (the fix's work order).

    python -m tests.replays.try_duet            # from the repository root, with the test venv

Not a test (nothing is asserted): each dialect plays three pipelines — ``a-<d>`` (the dialect as
the answer model, a well-behaved reasoner), ``r-<d>`` (the dialect as the reasoner) and ``o-<d>``
(the dialect alone, for usage and errors) — through ``duet serve`` on 127.0.0.1, on Chat
Completions, Responses and Messages, streamed and not: a text turn, a client-tool round trip,
usage, errors before the stream and in it. Each line printed is one check that failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import anthropic
import httpx
import openai
import yaml

from . import ANSWER, DIALECTS, REASONING, ROUND_TRIP_ANSWER, TOOL_MARK, ReplayUpstream, Scenario

GOOD = "vllm-0.10"  # the partner every dialect is paired with: reasoning_content, which Duet reads today
GOOD_REASONER, GOOD_ANSWER = "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct"
WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ROOT = Path(__file__).resolve().parents[2]


def answer_model(name: str) -> str:
    dialect = DIALECTS[name]
    return next((m for m in dialect.default_models if dialect.thinks(m, {})), dialect.default_models[0])


NEEDS: dict[str, dict[str, Any]] = {
    # Gemini writes thought summaries only when asked (docs: thought-signatures, OpenAI compatibility).
    "gemini": {"create_args": {"extra_body": {"google": {"thinking_config": {"include_thoughts": True}}}}},
}
"""What a dialect's model section needs besides its URL and model name (the providers page lists it)."""


def config(upstream: ReplayUpstream) -> dict[str, Any]:
    def model(dialect: str, name: str) -> dict[str, Any]:
        return {"base_url": upstream.base_url(dialect), "model": name, "max_retries": 0, **NEEDS.get(dialect, {})}

    pipelines = []
    for name in DIALECTS:
        pipelines += [
            {"name": f"a-{name}", "reasoner": model(GOOD, GOOD_REASONER), "answer": model(name, answer_model(name))},
            {"name": f"r-{name}", "reasoner": model(name, answer_model(name)), "answer": model(GOOD, GOOD_ANSWER)},
            {"name": f"o-{name}", "answer": model(name, answer_model(name))},
            {"name": f"p-{name}", "answer": model(name, DIALECTS[name].default_models[0])},  # its plain (first) model
        ]
    return {"pipelines": pipelines}


def pair_config(upstream: ReplayUpstream) -> dict[str, Any]:
    """A pipeline ``x-<reasoner>-<answer>`` for every pair of dialects (bench/dialect_pairs.py)."""
    def model(dialect: str) -> dict[str, Any]:
        return {"base_url": upstream.base_url(dialect), "model": answer_model(dialect), "max_retries": 0, **NEEDS.get(dialect, {})}

    return {"pipelines": [{"name": f"x-{r}-{a}", "reasoner": model(r), "answer": model(a)} for r in DIALECTS for a in DIALECTS]}


def start_duet(upstream: ReplayUpstream, directory: Path, settings: dict[str, Any] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    path = directory / "duet.yaml"
    path.write_text(yaml.safe_dump(settings or config(upstream)))
    port = 18000 + os.getpid() % 1000
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    env.update(DUET_PORT=str(port), DUET_API_KEYS="", DUET_STATE_URL=f"sqlite:///{directory / 'state.db'}")
    log = (directory / "duet.log").open("w")
    process = subprocess.Popen([str(Path(sys.executable).parent / "duet"), "serve", "--config", str(path)],
                               env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.2)
    process.terminate()
    raise RuntimeError((directory / "duet.log").read_text())


# -- one conversation on each protocol: (text, reasoning, tool call id or None, usage) -----------
Said = tuple[str, str, "tuple[str, dict[str, Any]] | None", int]


def chat(base: str, model: str, stream: bool, messages: list[dict[str, Any]]) -> Said:
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0, timeout=30)
    tools = [{"type": "function", "function": WEATHER}]
    if not stream:
        done = client.chat.completions.create(model=model, messages=messages, tools=tools)  # type: ignore[arg-type]
        message = done.choices[0].message
        call = message.tool_calls[0] if message.tool_calls else None
        reasoning = (message.model_extra or {}).get("reasoning_content") or ""
        found = (call.id, json.loads(call.function.arguments)) if call else None  # type: ignore[union-attr]
        return message.content or "", reasoning, found, done.usage.completion_tokens if done.usage else 0
    text, reasoning, calls, usage = "", "", {}, 0
    for chunk in client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True,  # type: ignore[arg-type]
                                                stream_options={"include_usage": True}):
        usage = chunk.usage.completion_tokens if chunk.usage else usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, ["", ""])
                entry[0] = tc.id or entry[0]
                entry[1] += tc.function.arguments or "" if tc.function else ""
    found = (calls[0][0], json.loads(calls[0][1])) if calls else None
    return text, reasoning, found, usage


def responses(base: str, model: str, stream: bool, items: list[dict[str, Any]]) -> Said:
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0, timeout=30)
    tools = [{"type": "function", **WEATHER}]
    if stream:
        with client.responses.stream(model=model, input=items, tools=tools, store=False) as events:  # type: ignore[arg-type]
            done = events.get_final_response()
    else:
        done = client.responses.create(model=model, input=items, tools=tools, store=False)  # type: ignore[arg-type]
    reasoning = "".join(c.text for item in done.output if item.type == "reasoning" for c in (item.content or []))
    reasoning += "".join(s.text for item in done.output if item.type == "reasoning" for s in item.summary)
    calls = [item for item in done.output if item.type == "function_call"]
    found = (calls[0].call_id, json.loads(calls[0].arguments)) if calls else None
    items.extend(item.model_dump(exclude_none=True) for item in done.output if item.type == "function_call")
    return done.output_text, reasoning, found, done.usage.output_tokens if done.usage else 0


def messages_api(base: str, model: str, stream: bool, history: list[dict[str, Any]]) -> Said:
    client = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0, timeout=30)
    tools = [{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}]
    if stream:
        with client.messages.stream(model=model, max_tokens=512, messages=history, tools=tools) as events:  # type: ignore[arg-type]
            done = events.get_final_message()
    else:
        done = client.messages.create(model=model, max_tokens=512, messages=history, tools=tools)  # type: ignore[arg-type]
    text = "".join(b.text for b in done.content if b.type == "text")
    reasoning = "".join(b.thinking for b in done.content if b.type == "thinking")
    uses = [b for b in done.content if b.type == "tool_use"]
    history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in done.content]})
    return text, reasoning, (uses[0].id, uses[0].input) if uses else None, done.usage.output_tokens  # type: ignore[return-value]


def first_turn(protocol: str, question: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": question}]


def follow_up(protocol: str, history: list[dict[str, Any]], said: Said) -> list[dict[str, Any]]:
    call_id, arguments = said[2]  # type: ignore[misc]
    if protocol == "chat":
        assistant = {"role": "assistant", "content": said[0] or None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(arguments)}}]}
        return [*history, assistant, {"role": "tool", "tool_call_id": call_id, "content": "18 °C, sunny"}]
    if protocol == "responses":
        return [*history, {"type": "function_call_output", "call_id": call_id, "output": "18 °C, sunny"}]
    return [*history, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "18 °C, sunny"}]}]


PROTOCOLS: dict[str, Callable[[str, str, bool, list[dict[str, Any]]], Said]] = {
    "chat": chat, "responses": responses, "messages": messages_api}


# -- the checks ----------------------------------------------------------------------------------
def refusals_since(upstream: ReplayUpstream, mark: int) -> list[str]:
    return [f"{r.dialect} refused {r.status}: {r.refusal.body.decode()[:160]}" for r in upstream.requests[mark:] if r.refusal]


def text_turn(base: str, pipeline: str, role: str, protocol: str, stream: bool) -> list[str]:
    text, reasoning, _, _ = PROTOCOLS[protocol](base, pipeline, stream, first_turn(protocol, "Weather in Paris?"))
    problems = []
    if text != "".join(ANSWER):
        problems.append(f"answer text {text!r}")
    thoughts = "".join(REASONING)
    if role == "r" and thoughts not in reasoning.replace("\n", ""):
        problems.append(f"reasoning incomplete {reasoning[-80:]!r}")
    for leak in ("</think>", "<think>", "<thought>", "".join(ANSWER)):
        if role == "r" and leak in reasoning:
            problems.append(f"{leak!r} in the reasoning")
    return problems


def round_trip(upstream: ReplayUpstream, base: str, pipeline: str, protocol: str, stream: bool) -> list[str]:
    mark = len(upstream.requests)
    history = first_turn(protocol, f"Weather in Paris? {TOOL_MARK}")
    said = PROTOCOLS[protocol](base, pipeline, stream, history)
    if said[2] is None or said[2][1].get("city") != "Paris":
        return [f"no tool call (text {said[0]!r})"] + refusals_since(upstream, mark)
    text = PROTOCOLS[protocol](base, pipeline, stream, follow_up(protocol, history, said))[0]
    problems = [] if "".join(ROUND_TRIP_ANSWER) in text else [f"follow-up text {text!r}"]
    return problems + refusals_since(upstream, mark)


def guarded(check: Callable[[], list[str]]) -> list[str]:
    try:
        return check()
    except Exception as error:  # noqa: BLE001 - every failure is a line of the report
        status = getattr(error, "status_code", "")
        return [f"{type(error).__name__} {status}: {str(error)[:200]}"]


def usage_check(base: str, name: str, stream: bool) -> list[str]:
    """Duet's completion tokens for a text turn and a tool-result turn against what the upstream reported."""
    dialect, model = DIALECTS[name], answer_model(name)
    thought = len(REASONING) if dialect.thinks(model, NEEDS.get(name, {}).get("create_args", {}).get("extra_body", {})) else 0
    history = first_turn("chat", f"Weather? {TOOL_MARK}")
    said = chat(base, f"o-{name}", stream, history)
    turns = [("text", chat(base, f"o-{name}", stream, first_turn("chat", "Weather?"))[3], len(ANSWER) + thought)]
    if said[2] is not None:
        turns.append(("tool-result turn", chat(base, f"o-{name}", stream, follow_up("chat", history, said))[3],
                      len(ROUND_TRIP_ANSWER) + thought))
    return [f"{turn} usage completion_tokens {got}, upstream said {expected}" for turn, got, expected in turns if got != expected]


def error_check(upstream: ReplayUpstream, base: str, name: str, kind: str, stream: bool) -> str:
    """What Duet answers when the upstream fails in this way (a description, flagged when wrong)."""
    model = answer_model(name)
    if kind == "model_not_found":
        upstream.unserve(name, model)
    else:
        upstream.script(name, Scenario.mid_stream(after=2) if kind == "mid_stream" else Scenario.error(kind))  # type: ignore[arg-type]
    body = {"model": f"o-{name}", "messages": [{"role": "user", "content": "Weather?"}], "stream": stream}
    try:
        response = httpx.post(base + "/v1/chat/completions", json=body, timeout=30)
    finally:
        upstream.reset()  # the model served again, no scenario left waiting
    if not stream:
        return f"{response.status_code} {response.text[:150]} … {response.text[-120:]}"
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return f"{response.status_code} … {' | '.join(e[:110] for e in events[-2:])}"


def main() -> None:
    with ReplayUpstream(pace=0.0005) as upstream, tempfile.TemporaryDirectory() as directory:
        process, base = start_duet(upstream, Path(directory))
        try:
            for name in sys.argv[1:] or DIALECTS:
                report(upstream, base, name)
        finally:
            process.terminate()
            process.wait(15)


def report(upstream: ReplayUpstream, base: str, name: str) -> None:
    print(f"== {name}", flush=True)
    for role in ("a", "r"):
        for protocol in PROTOCOLS:
            for stream in (False, True):
                where = f"{role}-{name} {protocol} {'stream' if stream else 'whole'}"
                for problem in guarded(lambda: text_turn(base, f"{role}-{name}", role, protocol, stream)):
                    print(f"  {where} text: {problem}")
                for problem in guarded(lambda: round_trip(upstream, base, f"{role}-{name}", protocol, stream)):
                    print(f"  {where} round trip: {problem}")
    if DIALECTS[name].default_models[0] != answer_model(name):
        for stream in (False, True):
            for problem in guarded(lambda: round_trip(upstream, base, f"p-{name}", "chat", stream)):
                print(f"  p-{name} chat {'stream' if stream else 'whole'} round trip: {problem}")
    for stream in (False, True):
        for problem in guarded(lambda: usage_check(base, name, stream)):
            print(f"  o-{name} chat {'stream' if stream else 'whole'}: {problem}")
        for kind in ("rate_limit", "bad_request", "server_error", "model_not_found", "mid_stream"):
            print(f"  o-{name} chat {'stream' if stream else 'whole'} {kind}: {error_check(upstream, base, name, kind, stream)}")


if __name__ == "__main__":
    main()
