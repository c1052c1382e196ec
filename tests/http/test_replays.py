"""The replay upstreams behave as their servers are documented to (tests/replays/README.md).

Clients are plain httpx (to read each wire byte for byte) and the openai SDK (to prove each
dialect is a stream a real client parses) — never Duet: these tests prove the replays, so that
Duet's own tests can later trust them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator

import httpx
import openai
import pytest

from tests.replays import ANSWER, DIALECTS, PARALLEL_MARK, REASONING, ROUND_TRIP_ANSWER, TOOL_MARK, ReplayUpstream, Scenario

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
THINK = {"enable_thinking": True, "google": {"thinking_config": {"include_thoughts": True}}}  # DashScope's and Gemini's switches
ALL = sorted(DIALECTS)
# Magistral's content is a list of chunks, where the SDK's model types a string: it warns, and parses.
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

# Where each dialect puts what it says (the README's table, as data).
REASONING_AT = {
    "vllm": "reasoning", "vllm-0.11": "both", "vllm-0.10": "reasoning_content", "vllm-noparser": "</think>",
    "ollama": "reasoning", "llamacpp": "reasoning_content", "llamacpp-none": "</think>", "llamacpp-legacy": "legacy",
    "sglang": "reasoning_content", "deepseek": "reasoning_content", "openrouter": "details", "groq": "reasoning",
    "mistral": "thinking_chunks", "gemini": "<thought>", "dashscope": "reasoning_content", "moonshot": "reasoning_content",
    "zhipu": "reasoning_content",
}
WHOLE_CALLS = {"ollama", "groq", "mistral", "gemini", "zhipu"}  # arguments arrive whole, not in fragments
USAGE_AT = {  # where usage is without include_usage / with it
    **{name: (None, "trailing") for name in ("vllm", "vllm-0.11", "vllm-0.10", "vllm-noparser", "ollama", "llamacpp",
                                              "llamacpp-none", "llamacpp-legacy", "sglang", "dashscope")},
    **{name: ("finish", "finish") for name in ("deepseek", "mistral", "gemini", "zhipu")},
    "openrouter": ("trailing", "trailing"), "groq": ("x_groq", "x_groq+trailing"), "moonshot": ("choice", "choice"),
}
MID_STREAM = {
    **{name: "error, [DONE]" for name in ("vllm", "vllm-0.11", "vllm-0.10", "vllm-noparser", "sglang")},
    **{name: "error, end" for name in ("llamacpp", "llamacpp-none", "llamacpp-legacy")},
    **{name: "dropped" for name in ("deepseek", "mistral", "gemini", "dashscope", "moonshot")},
    "openrouter": "choices with error, finish error", "groq": "x_groq.error, end", "zhipu": "finish network_error",
    "ollama": "empty content, end",
}
STATUS = {  # (rate_limit, model_not_found) statuses
    **{name: (429, 404) for name in ("vllm", "vllm-0.11", "vllm-0.10", "vllm-noparser", "sglang", "groq", "gemini",
                                      "dashscope", "moonshot")},
    "ollama": (503, 404), "llamacpp": (503, 404), "llamacpp-none": (503, 404), "llamacpp-legacy": (503, 404),
    "deepseek": (429, 400), "openrouter": (429, 400), "mistral": (429, 400), "zhipu": (429, 400),
}
RETRY_AFTER = {"vllm", "vllm-0.11", "vllm-0.10", "vllm-noparser", "sglang", "openrouter", "groq"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayUpstream]:
    with ReplayUpstream() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(upstream: ReplayUpstream) -> None:
    upstream.reset()


def thinking_model(name: str) -> str:
    dialect = DIALECTS[name]
    return next((m for m in dialect.default_models if dialect.thinks(m, THINK)), dialect.default_models[0])


@dataclass
class Heard:
    """A stream as a careful client reads it: every field, wherever the dialect put it."""

    content: str = ""
    fields: dict[str, str] = field(default_factory=dict)  # reasoning / reasoning_content / details / thinking_chunks
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)  # where -> usage
    errors: list[Any] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    done: bool = False
    dropped: bool = False

    def add(self, key: str, text: str | None) -> None:
        if text:
            self.fields[key] = self.fields.get(key, "") + text

    def chunk(self, data: dict[str, Any]) -> None:
        if "error" in data:
            self.errors.append(data["error"])
        if data.get("usage"):
            self.usage["finish" if any(c.get("finish_reason") for c in data.get("choices") or []) else "trailing"] = data["usage"]
        if (data.get("x_groq") or {}).get("usage"):
            self.usage["x_groq"] = data["x_groq"]["usage"]
        for choice in data.get("choices") or []:
            self.choice(choice)

    def choice(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish.append(choice["finish_reason"])
        if choice.get("usage"):
            self.usage["choice"] = choice["usage"]
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, list):  # Mistral's content chunks
            for part in content:
                if part.get("type") == "thinking":
                    self.add("thinking_chunks", "".join(p.get("text", "") for p in part["thinking"]))
                else:
                    self.content += part.get("text", "")
        elif content:
            self.content += content
        self.add("reasoning", delta.get("reasoning"))
        self.add("reasoning_content", delta.get("reasoning_content"))
        for detail in delta.get("reasoning_details") or []:
            self.add("details", detail.get("text"))
            if detail.get("signature"):
                self.fields["signature"] = detail["signature"]
        for call in delta.get("tool_calls") or []:
            self.tool_call(call)

    def tool_call(self, call: dict[str, Any]) -> None:
        entry = self.calls.setdefault(call["index"], {"id": None, "name": None, "arguments": "", "extra": None, "pieces": 0})
        entry["id"] = call.get("id") or entry["id"]  # later fragments repeat "" (DashScope) or null (SGLang)
        function = call.get("function") or {}
        entry["name"] = function.get("name") or entry["name"]
        if function.get("arguments"):
            entry["arguments"] += function["arguments"]
            entry["pieces"] += 1
        entry["extra"] = call.get("extra_content") or entry["extra"]


def listen(upstream: ReplayUpstream, name: str, body: dict[str, Any]) -> Heard:
    heard = Heard()
    with httpx.stream("POST", upstream.base_url(name) + "/chat/completions", json={**body, "stream": True}, timeout=10) as response:
        assert response.status_code == 200, response.read()
        try:
            for line in response.iter_lines():
                if line.startswith(":"):
                    heard.comments.append(line)
                elif line == "data: [DONE]":
                    heard.done = True
                elif line.startswith("data: "):
                    heard.chunk(json.loads(line[6:]))
        except httpx.RemoteProtocolError:
            heard.dropped = True
    return heard


def ask(name: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"model": thinking_model(name), "messages": [{"role": "user", "content": text}], "tools": TOOLS, **THINK, **extra}


def sdk_ask(name: str, text: str, streamed: bool = True) -> dict[str, Any]:
    """The same request as the openai SDK's arguments (the servers' own switches go in extra_body;
    DashScope refuses to think without a stream, so its switch stays off then)."""
    switches = THINK if streamed or name != "dashscope" else {}
    return {"model": thinking_model(name), "messages": [{"role": "user", "content": text}], "tools": TOOLS, "extra_body": switches}


# -- what each dialect streams -------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_reasoning_then_answer_where_the_server_puts_them(upstream: ReplayUpstream, name: str) -> None:
    heard = listen(upstream, name, ask(name, "Weather in Paris?"))
    thoughts, answer, at = "".join(REASONING), "".join(ANSWER), REASONING_AT[name]
    if at in ("</think>", "<thought>", "legacy"):
        opener = {"</think>": "", "<thought>": "<thought>", "legacy": "<think>"}[at]
        closer = "</thought>" if at == "<thought>" else "</think>"
        assert heard.content.replace("\n\n", "") == f"{opener}{thoughts}{closer}{answer}"
        assert heard.fields.get("reasoning_content", "") == (thoughts if at == "legacy" else "")
    else:
        assert heard.content == answer
        expected = {"both": {"reasoning": thoughts, "reasoning_content": thoughts}, "details": {"reasoning": thoughts, "details": thoughts}}
        got = {k: v for k, v in heard.fields.items() if k != "signature"}
        assert got == expected.get(at, {at: thoughts})
    assert heard.finish == ["stop"] and heard.done != heard.dropped


@pytest.mark.parametrize("name", ALL)
def test_parallel_tool_calls(upstream: ReplayUpstream, name: str) -> None:
    heard = listen(upstream, name, ask(name, f"Paris and Tokyo? {PARALLEL_MARK}"))
    assert [json.loads(heard.calls[i]["arguments"])["city"] for i in sorted(heard.calls)] == ["Paris", "Tokyo"]
    assert all(call["name"] == "get_weather" for call in heard.calls.values())
    issued = [call.id for call in upstream.ledgers[name].calls]
    assert [heard.calls[i]["id"] for i in sorted(heard.calls)] == issued and len(set(issued)) == 2
    pieces = {call["pieces"] for call in heard.calls.values()}
    assert pieces == ({1} if name in WHOLE_CALLS else {3}), "arguments split mid-argument, or whole"
    assert heard.finish == [DIALECTS[name].tool_finish]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("include_usage", [False, True])
def test_usage_where_the_server_puts_it(upstream: ReplayUpstream, name: str, include_usage: bool) -> None:
    heard = listen(upstream, name, ask(name, "Weather?", stream_options={"include_usage": include_usage}))
    where = USAGE_AT[name][include_usage]
    assert set(heard.usage) == (set(where.split("+")) if where else set())
    for usage in heard.usage.values():
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


@pytest.mark.parametrize("name", ALL)
def test_the_openai_sdk_parses_every_dialect(upstream: ReplayUpstream, name: str) -> None:
    client = openai.OpenAI(base_url=upstream.base_url(name), api_key="k", max_retries=0)
    chunks = list(client.chat.completions.create(**sdk_ask(name, f"Go {TOOL_MARK}"), stream=True))
    calls = [tc for c in chunks for choice in c.choices for tc in choice.delta.tool_calls or []]
    assert calls and calls[0].function is not None and calls[0].function.name == "get_weather"
    completion = client.chat.completions.create(**sdk_ask(name, "Weather?", streamed=False))
    message = completion.choices[0].message
    assert completion.usage is not None and completion.choices[0].finish_reason == "stop"
    text = message.content if isinstance(message.content, str) else json.dumps(message.content, ensure_ascii=False)
    assert "".join(ANSWER) in text
    if name != "zhipu":  # the SDK's accumulating helper skips chunks without object: chat.completion.chunk
        with client.chat.completions.stream(**sdk_ask(name, f"Go {PARALLEL_MARK}")) as stream:
            final = stream.get_final_completion()
        assert [json.loads(tc.function.arguments)["city"] for tc in final.choices[0].message.tool_calls or []] == ["Paris", "Tokyo"]


@pytest.mark.parametrize("name", ALL)
def test_a_tool_round_trip_carrying_back_what_the_server_issued(upstream: ReplayUpstream, name: str) -> None:
    first = listen(upstream, name, ask(name, f"Paris? {TOOL_MARK}"))
    call = first.calls[0]
    assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]},
         **({"extra_content": call["extra"]} if call["extra"] else {})}]}
    for key in ("reasoning_content", "reasoning"):
        if key in first.fields:
            assistant[key] = first.fields[key]
    follow_up = ask(name, "")
    follow_up["messages"] += [assistant, {"role": "tool", "tool_call_id": call["id"], "content": "18 °C, sunny"}]
    second = listen(upstream, name, follow_up)
    assert "".join(ROUND_TRIP_ANSWER) in second.content
    assert upstream.requests_for(name)[-1].body["messages"][-2]["tool_calls"][0]["id"] == call["id"]


# -- errors, before the stream and in it ---------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kind", ["rate_limit", "bad_request", "model_not_found", "server_error"])
def test_errors_before_the_stream(upstream: ReplayUpstream, name: str, kind: str) -> None:
    upstream.script(name, Scenario.error(kind))  # type: ignore[arg-type]
    response = httpx.post(upstream.base_url(name) + "/chat/completions", json=ask(name, "hi", stream=True), timeout=10)
    expected = {"rate_limit": STATUS[name][0], "model_not_found": STATUS[name][1], "bad_request": 400}.get(kind)
    assert response.status_code == (expected or response.status_code) and response.status_code >= 400
    assert ("retry-after" in response.headers) == (kind == "rate_limit" and name in RETRY_AFTER)
    body = response.json()
    if name == "gemini":
        assert isinstance(body, list) and body[0]["error"]["code"] == response.status_code
    elif name in ("vllm-0.10", "sglang", "mistral"):
        assert body["object"] == "error" and body["message"]
    else:
        assert body["error"]["message"]
    client = openai.OpenAI(base_url=upstream.base_url(name), api_key="k", max_retries=0)
    upstream.script(name, Scenario.error(kind))  # type: ignore[arg-type]
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(**sdk_ask(name, "hi", streamed=False))
    assert raised.value.status_code == response.status_code


@pytest.mark.parametrize("name", ALL)
def test_a_model_the_server_does_not_have(upstream: ReplayUpstream, name: str) -> None:
    models = httpx.get(upstream.base_url(name) + "/models", timeout=10).json()
    assert models["object"] == "list" and len(models["data"]) == len(DIALECTS[name].default_models)
    response = httpx.post(upstream.base_url(name) + "/chat/completions",
                          json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    if DIALECTS[name].ignores_model:  # a single-model server answers whatever name it is given
        assert response.status_code == 200
    else:
        assert response.status_code == STATUS[name][1]


def test_ollama_answers_404_for_a_model_that_is_not_pulled(upstream: ReplayUpstream) -> None:
    upstream.unserve("ollama", "qwen3:8b")
    response = httpx.post(upstream.base_url("ollama") + "/chat/completions",
                          json={"model": "qwen3:8b", "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    assert response.status_code == 404
    assert response.json() == {"error": {"message": "model 'qwen3:8b' not found", "type": "not_found_error", "param": None, "code": None}}
    assert "qwen3:8b" not in [m["id"] for m in httpx.get(upstream.base_url("ollama") + "/models", timeout=10).json()["data"]]


@pytest.mark.parametrize("name", ALL)
def test_a_failure_in_the_middle_of_the_stream(upstream: ReplayUpstream, name: str) -> None:
    upstream.script(name, Scenario.mid_stream(after=2))
    heard = listen(upstream, name, ask(name, "hi"))
    assert heard.content == "".join(ANSWER)[: len(heard.content)] and heard.content != "".join(ANSWER)
    shape = MID_STREAM[name]
    assert heard.done == shape.endswith("[DONE]") or name in ("openrouter", "zhipu")
    assert heard.dropped == (shape == "dropped")
    if shape.startswith("error"):
        assert heard.errors and "message" in (heard.errors[0].get("error") or heard.errors[0])
    if name == "openrouter":
        assert heard.finish == ["error"] and heard.errors == [{"code": "server_error", "message": "Provider disconnected unexpectedly"}]
    if name == "zhipu":
        assert heard.finish == ["network_error"]
    if name in ("groq", "ollama"):
        assert heard.finish == [] and not heard.done and not heard.dropped


def test_the_openai_sdk_raises_on_openrouters_error_chunk(upstream: ReplayUpstream) -> None:
    upstream.script("openrouter", Scenario.mid_stream(after=3))
    client = openai.OpenAI(base_url=upstream.base_url("openrouter"), api_key="k", max_retries=0)
    with pytest.raises(openai.APIError, match="Provider disconnected unexpectedly"):
        list(client.chat.completions.create(**sdk_ask("openrouter", "hi"), stream=True))


# -- what the servers want back on a follow-up ---------------------------------------------------
def follow_up(name: str, assistant: dict[str, Any], call_id: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Paris?"}, assistant, {"role": "tool", "tool_call_id": call_id, "content": "18 °C"}]
    return {"model": thinking_model(name), "messages": messages, "tools": TOOLS, **extra}


def a_call(call_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}, **extra}


def post(upstream: ReplayUpstream, name: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(upstream.base_url(name) + "/chat/completions", json=body, timeout=10)


def test_mistral_refuses_an_id_it_cannot_have_issued(upstream: ReplayUpstream) -> None:
    foreign = "call_abc123def456abc123def456"
    response = post(upstream, "mistral", follow_up("mistral", {"role": "assistant", "tool_calls": [a_call(foreign)]}, foreign))
    assert response.status_code == 400
    assert response.json() == {"object": "error", "message": f"Tool call id was {foreign} but must be a-z, A-Z, 0-9, with a length of 9.",
                               "type": "invalid_function_call", "param": None, "code": "3280"}
    assert post(upstream, "mistral", follow_up("mistral", {"role": "assistant", "tool_calls": [a_call("D681PevKs")]}, "D681PevKs")).status_code == 200


def test_gemini_wants_its_thought_signature_back(upstream: ReplayUpstream) -> None:
    first = listen(upstream, "gemini", ask("gemini", f"Go {PARALLEL_MARK}"))
    signature = first.calls[0]["extra"]["google"]["thought_signature"]
    assert first.calls[1]["extra"] is None, "in parallel calls only the first is signed"
    ids = [first.calls[i]["id"] for i in (0, 1)]
    bare = {"role": "assistant", "tool_calls": [a_call(ids[0]), a_call(ids[1])]}
    refused = post(upstream, "gemini", follow_up("gemini", bare, ids[0]))
    assert refused.status_code == 400 and refused.json()[0]["error"]["status"] == "INVALID_ARGUMENT"
    assert "missing a thought_signature" in refused.json()[0]["error"]["message"]
    for value, status in ((signature, 200), ("skip_thought_signature_validator", 200), ("forged", 400)):
        signed = {"role": "assistant", "tool_calls": [a_call(ids[0], extra_content={"google": {"thought_signature": value}}), a_call(ids[1])]}
        assert post(upstream, "gemini", follow_up("gemini", signed, ids[0])).status_code == status
    earlier_turn = follow_up("gemini", bare, ids[0])
    earlier_turn["messages"].append({"role": "user", "content": "And now?"})
    assert post(upstream, "gemini", earlier_turn).status_code == 200, "only the current turn is validated"


@pytest.mark.parametrize("name, model", [("deepseek", "deepseek-reasoner"), ("moonshot", "kimi-k2.6")])
def test_thinking_servers_want_the_reasoning_of_tool_turns_back(upstream: ReplayUpstream, name: str, model: str) -> None:
    for reasoning, status in ((None, 400), ("", 400), ("I looked it up.", 200)):
        assistant = {"role": "assistant", "content": None, "tool_calls": [a_call("call_1")]}
        if reasoning is not None:
            assistant["reasoning_content"] = reasoning
        response = post(upstream, name, {**follow_up(name, assistant, "call_1"), "model": model})
        assert response.status_code == status, response.text
    message = response.json() if status == 200 else None
    refused = post(upstream, name, {**follow_up(name, {"role": "assistant", "tool_calls": [a_call("call_1")]}, "call_1"), "model": model})
    text = refused.json()["error"]["message"]
    assert text.startswith("Missing `reasoning_content` field in the assistant message at message index 1" if name == "deepseek"
                           else "thinking is enabled but reasoning_content is missing in assistant tool call message at index 1")
    assert message is not None
    plain = {"deepseek": "deepseek-chat", "moonshot": "moonshot-v1-8k"}[name]
    assert post(upstream, name, {**follow_up(name, {"role": "assistant", "tool_calls": [a_call("call_1")]}, "call_1"), "model": plain}).status_code == 200


@pytest.mark.parametrize("name", ["deepseek", "groq"])
def test_a_tool_result_must_answer_a_call_of_the_assistant_message_before_it(upstream: ReplayUpstream, name: str) -> None:
    assistant = {"role": "assistant", "content": None, "tool_calls": [a_call("call_1")], "reasoning_content": "r"}
    assert post(upstream, name, follow_up(name, assistant, "call_2")).status_code == 400
    assert post(upstream, name, follow_up(name, assistant, "call_1")).status_code == 200


def test_ollama_refuses_tool_call_arguments_that_are_not_json(upstream: ReplayUpstream) -> None:
    call = {**a_call("call_1"), "function": {"name": "get_weather", "arguments": "{city: Paris"}}
    response = post(upstream, "ollama", follow_up("ollama", {"role": "assistant", "tool_calls": [call]}, "call_1"))
    assert response.status_code == 400 and response.json()["error"]["message"] == "invalid tool call arguments"


def test_dashscope_thinks_only_in_a_stream(upstream: ReplayUpstream) -> None:
    response = post(upstream, "dashscope", {"model": "qwen-plus", "enable_thinking": True, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "parameter.enable_thinking must be set to false for non-streaming calls"


def test_openrouter_signs_its_reasoning(upstream: ReplayUpstream) -> None:
    heard = listen(upstream, "openrouter", ask("openrouter", f"Go {TOOL_MARK}"))
    assert heard.comments == [": OPENROUTER PROCESSING"] and heard.fields["signature"]
    assert upstream.ledgers["openrouter"].calls[0].signature == heard.fields["signature"]


# -- the server itself ---------------------------------------------------------------------------
def test_streams_are_paced_one_event_per_write() -> None:
    with ReplayUpstream(pace=0.05) as slow:
        with httpx.stream("POST", slow.base_url("vllm") + "/chat/completions", timeout=10,
                          json={"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "stream": True}) as response:
            lines = response.iter_lines()
            first = next(lines)
            assert first.startswith("data: ") and not slow.requests[0].ended.is_set(), "the rest is still being written"
            rest = [line for line in lines if line]
        assert slow.requests[0].ended.wait(5) and rest[-1] == "data: [DONE]"


def test_the_dialect_can_be_chosen_by_the_model_name(upstream: ReplayUpstream) -> None:
    bare = upstream.base_url("vllm").replace("/vllm/v1", "/v1")
    response = httpx.post(bare + "/chat/completions", timeout=10,
                          json={"model": "groq/llama-3.3-70b-versatile", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200 and response.json()["model"] == "llama-3.3-70b-versatile"
    assert upstream.requests[-1].dialect == "groq"


def test_every_request_is_recorded_with_its_refusal(upstream: ReplayUpstream) -> None:
    post(upstream, "mistral", follow_up("mistral", {"role": "assistant", "tool_calls": [a_call("bad_id")]}, "bad_id"))
    record = upstream.requests_for("mistral")[-1]
    assert record.status == 400 and record.refusal is not None and record.body["messages"][1]["tool_calls"][0]["id"] == "bad_id"
    assert record.ended.is_set()
