"""Request options reach the answer model; images reach it when it can see."""

from __future__ import annotations

import httpx

from tests.conftest import ANSWER, REASONER
from tests.scripted_upstream import ScriptedUpstream, users_words

USER = [{"role": "user", "content": "hi"}]
PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_sampling_options_reach_the_answer_model_only(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    options = {
        "temperature": 0.3,
        "top_p": 0.9,
        "max_tokens": 256,
        "stop": ["Observation"],
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "seed": 7,
        "response_format": {"type": "json_object"},
        "user": "u-42",
        "logit_bias": {"50256": -100},
    }
    assert http.post("/v1/chat/completions", json={"model": "duet", "messages": USER, **options}).status_code == 200
    answer = upstream.requests_for(ANSWER)[0].body
    assert {key: answer[key] for key in options} == options
    reasoner = upstream.requests_for(REASONER)[0].body
    assert not set(options) & set(reasoner)  # the reasoning model keeps its own settings


def test_max_completion_tokens_and_parallel_tool_calls(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {"model": "duet", "messages": USER, "max_completion_tokens": 99, "parallel_tool_calls": True, "tools": tools}
    http.post("/v1/chat/completions", json=body)
    answer = upstream.requests_for(ANSWER)[0].body
    assert answer["max_completion_tokens"] == 99 and answer["parallel_tool_calls"] is True
    assert "max_tokens" not in answer


def test_parallel_tool_calls_only_with_tools(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    http.post("/v1/chat/completions", json={"model": "duet", "messages": USER, "parallel_tool_calls": False})
    assert "parallel_tool_calls" not in upstream.requests_for(ANSWER)[0].body  # servers reject it without tools


def test_images_reach_a_vision_model_verbatim(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PIXEL, "detail": "low"}}]
    http.post("/v1/chat/completions", json={"model": "duet-vision", "messages": [{"role": "user", "content": content}]})
    answer = upstream.requests_for("qwen-vl")[0].body
    assert answer["messages"][-1]["content"][:2] == content  # then the reasoning's note (issue 26)
    assert answer["messages"][-1]["content"][2]["text"].startswith("<reasoning>\n")
    reasoner = upstream.requests_for(REASONER)[0].body
    assert reasoner["messages"][-1]["content"] == "What is this?\n[image omitted]"


def test_images_are_noted_for_a_model_without_vision(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
    response = http.post("/v1/chat/completions", json={"model": "duet", "messages": [{"role": "user", "content": content}]})
    assert response.status_code == 200
    assert users_words(upstream.requests_for(ANSWER)[0].body["messages"][-1]["content"]) == "What is this?\n[image omitted]"


def test_system_prompts_and_multiple_turns_are_kept(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": [{"type": "text", "text": "two"}]},
    ]
    http.post("/v1/chat/completions", json={"model": "answer-only", "messages": messages})
    sent = upstream.requests_for(ANSWER)[0].body["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[1:] == [{"role": "user", "content": "one"}, {"role": "assistant", "content": "1"},
                        {"role": "user", "content": [{"type": "text", "text": "two"}]}]
