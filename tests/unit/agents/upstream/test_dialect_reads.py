"""The dialect shapes of real model servers, read without sockets (issue 25): each branch the
accumulator, the splitter, the error mapping and the id translation take for one server's shape.
tests/http/test_dialects.py proves the same through ``duet serve`` and replayed servers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage, UserMessage

from duet.agents._errors import UpstreamModelNotFound, UpstreamStatusError
from duet.agents._thinking import ReasoningSplitter, ReasoningText, opens_thinking, remember_thinking
from duet.agents._upstream_calls import IssuedCall, UpstreamCall, issue, issued_in, to_upstream
from duet.agents.upstream._accumulator import StreamAccumulator
from duet.agents.upstream._errors import status_error, unlisted_model
from duet.agents.upstream._transform import messages_to_openai


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, choice: dict[str, Any] | None = None,
          **top: Any) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish, **(choice or {})}], **top}).encode()


def split(pieces: list[str], opened: bool = False) -> tuple[str, str, ReasoningSplitter]:
    splitter = ReasoningSplitter(opened)
    reasoning, content = "", ""
    for piece in pieces:
        r, c = splitter.feed(piece)
        reasoning, content = reasoning + r, content + c
    r, c = splitter.flush()
    if splitter.answer_was_reasoned:
        reasoning = ""
    return reasoning + r, content + c, splitter


# -- reading a stream ------------------------------------------------------------------------------
def test_magistral_thinking_chunks_are_reasoning() -> None:
    stream = StreamAccumulator("magistral")
    thinking = {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Check."}]}]}
    pieces = stream.read([chunk(thinking), chunk({"content": "Hi"}), chunk({}, "stop"), b"[DONE]"])
    assert [(type(p).__name__, p) for p in pieces] == [("ReasoningText", "Check."), ("str", "Hi")]
    result = stream.result()
    assert (result.content, result.thought) == ("Hi", "Check.")
    whole = {"choices": [{"message": {"content": [thinking["content"][0], {"type": "text", "text": "Hi"}]}, "finish_reason": "stop"}]}
    assert StreamAccumulator("m").read_completion(json.dumps(whole).encode())[1].thought == "Check."


@pytest.mark.parametrize("failure", [
    chunk({"content": ""}, "error", error={"code": "server_error", "message": "Provider disconnected"}),  # OpenRouter
    chunk({"content": ""}, "network_error"),  # Zhipu
])
def test_a_finish_that_is_a_failure_fails_the_stream(failure: bytes) -> None:
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"content": "Par"}), failure, b"[DONE]"])
    assert pieces == ["Par"] and stream.ended
    assert isinstance(stream.failure, UpstreamStatusError) and "failed mid-stream" in str(stream.failure)


@pytest.mark.parametrize("finish", [
    chunk({}, "stop", x_groq={"id": "req_1", "usage": {"prompt_tokens": 3, "completion_tokens": 5}}),  # Groq
    chunk({}, "stop", choice={"usage": {"prompt_tokens": 3, "completion_tokens": 5}}),  # Moonshot
])
def test_usage_beside_the_finish(finish: bytes) -> None:
    stream = StreamAccumulator("m")
    stream.read([chunk({"content": "Hi"}), finish, b"[DONE]"])
    assert stream.result().usage.completion_tokens == 5


def test_provider_fields_of_a_tool_call_are_kept() -> None:
    signed = {"index": 0, "id": "function-call-1", "type": "function", "function": {"name": "f", "arguments": "{}"},
              "extra_content": {"google": {"thought_signature": "c2ln"}}}
    stream = StreamAccumulator("gemini")
    stream.read([chunk({"tool_calls": [signed]}), chunk({}, "stop"), b"[DONE]"])
    [call] = stream.result().content  # type: ignore[misc]
    assert isinstance(call, UpstreamCall) and call.extra == {"extra_content": {"google": {"thought_signature": "c2ln"}}}
    plain = StreamAccumulator("m")
    plain.read([chunk({"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {}}]}), chunk({}, "tool_calls")])
    assert type(plain.result().content[0]) is FunctionCall  # type: ignore[index]


# -- telling thinking from the answer --------------------------------------------------------------
@pytest.mark.parametrize("pieces", [["I think", " so.</think>\n\nParis"], ["I think so.</th", "ink>", "\n\nParis"]])
def test_a_lone_close_tag_ends_the_reasoning(pieces: list[str]) -> None:
    reasoning, content, splitter = split(pieces, opened=True)
    assert (reasoning, content, splitter.reasoning_finished, splitter.showed) == ("I think so.", "Paris", True, True)


def test_a_lone_close_tag_unopened_keeps_what_came_before_in_the_same_piece() -> None:
    reasoning, content, splitter = split(["so.</think>\n\nParis"])
    assert (reasoning, content, splitter.reasoning_finished) == ("so.", "Paris", True)


def test_opened_without_a_close_tag_gives_the_text_back_as_the_answer() -> None:
    reasoning, content, splitter = split(["Paris is ", "sunny."], opened=True)
    assert (reasoning, content, splitter.answer_was_reasoned, splitter.showed) == ("", "Paris is sunny.", True, False)


def test_llama_cpp_legacy_copy_is_read_once() -> None:
    pieces = ["<think>", ReasoningText("plan"), "plan", ReasoningText(" more"), " more", "</think>", "Hi"]
    assert split(pieces)[:2] == ("plan more", "Hi")


def test_gemini_thought_summaries() -> None:
    assert split(["<thou", "ght>plan", "</thought>", "Hi"])[:2] == ("plan", "Hi")


def test_the_guess_and_what_a_client_learns() -> None:
    class Client:
        def __init__(self, model: str) -> None:
            self.model, self.thinks_in_content = model, None

    assert opens_thinking(Client("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")) and opens_thinking(Client("Qwen/Qwen3-8B"))
    assert not opens_thinking(Client("Qwen/Qwen3-Coder-30B")) and not opens_thinking(Client("llama3.1"))
    assert not opens_thinking(object())  # not Duet's client: tagged thinking only
    client = Client("llama3.1")
    remember_thinking(client, split(["x</think>y"])[2])
    assert client.thinks_in_content is True and opens_thinking(client)


# -- errors ----------------------------------------------------------------------------------------
def test_error_bodies_in_any_shape_give_their_message() -> None:
    gemini = b'[{"error": {"code": 429, "message": "Resource has been exhausted.", "status": "RESOURCE_EXHAUSTED"}}]'
    assert str(status_error(gemini, 429, "application/json", None, "g")) == "model g answered HTTP 429: Resource has been exhausted."
    assert str(status_error(b"upstream connect error", 503, "text/plain", None, "g")).endswith("HTTP 503: upstream connect error")


@pytest.mark.parametrize("status, body", [
    (404, b'{"error": {"message": "model \'qwen3:8b\' not found"}}'),  # Ollama
    (400, b'{"object": "error", "message": "Invalid model: x", "type": "invalid_model", "code": "1500"}'),  # Mistral
    (400, b'{"error": {"code": "1211", "message": "\\u6a21\\u578b\\u4e0d\\u5b58\\u5728"}}'),  # Zhipu
    (400, b'{"error": {"code": 400, "message": "x is not a valid model ID"}}'),  # OpenRouter
])
def test_a_model_the_upstream_does_not_serve(status: int, body: bytes) -> None:
    assert isinstance(status_error(body, status, "application/json", None, "m"), UpstreamModelNotFound)


def test_context_too_long_is_not_a_missing_model() -> None:
    body = b'{"error": {"message": "This model\'s maximum context length is 8192 tokens.", "code": "context_length_exceeded"}}'
    assert type(status_error(body, 400, "application/json", None, "m")) is UpstreamStatusError


def test_the_models_list() -> None:
    assert unlisted_model(b'{"data": [{"id": "models/gemini-2.5-flash"}]}', "gemini-2.5-flash") is None
    assert unlisted_model(b"not a list", "m") is None
    missing = unlisted_model(b'{"data": [{"id": "llama3"}]}', "qwen3:8b")
    assert isinstance(missing, UpstreamModelNotFound) and "qwen3:8b" in str(missing)


# -- tool-call ids ---------------------------------------------------------------------------------
def test_the_upstream_gets_back_its_ids_and_fields() -> None:
    issued: dict[str, IssuedCall] = {}
    upstream_calls = [UpstreamCall(id="a1B2c3D4e", name="f", arguments="{}", extra={"extra_content": {"google": {"s": 1}}}),
                      FunctionCall(id="Z9y8X7w6v", name="f", arguments="{}")]
    calls = issue(upstream_calls, issued)
    assert all(call.id.startswith("call_") for call in calls)
    results = FunctionExecutionResultMessage(content=[FunctionExecutionResult(content="ok", call_id=c.id, name="f") for c in calls])
    history = [UserMessage(content="Hi", source="user"), AssistantMessage(content=calls, source="a"), results]
    wire = messages_to_openai(to_upstream(history, issued))
    assert [c["id"] for c in wire[1]["tool_calls"]] == ["a1B2c3D4e", "Z9y8X7w6v"]
    assert wire[1]["tool_calls"][0]["extra_content"] == {"google": {"s": 1}} and "extra_content" not in wire[1]["tool_calls"][1]
    assert [m["tool_call_id"] for m in wire[2:]] == ["a1B2c3D4e", "Z9y8X7w6v"]
    assert issued_in(history, issued) == issued and history[1].content == calls  # the history itself is unchanged


def test_ids_that_cannot_be_sent_back_are_not_kept() -> None:
    issued: dict[str, IssuedCall] = {}
    issue([FunctionCall(id="", name="f", arguments="{}"), FunctionCall(id="x", name="f", arguments="{}"),
           FunctionCall(id="x", name="g", arguments="{}")], issued)
    assert issued == {}
