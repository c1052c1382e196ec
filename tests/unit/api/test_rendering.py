"""One renderer, two Chat Completions writers: the streamed chunks, put together the way the openai
SDK accumulates deltas, are the non-streamed body built from the same events — for every reasoning
output, legacy functions, usage asked for or not, tool calls and a failure mid-stream. The rules
themselves (``<think>`` blocks, hidden reasoning, one legacy call, the paragraph between reasoning
sources, the usage sums) are pinned on the body."""

from __future__ import annotations

import copy
import json
from typing import Any, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming._deltas import accumulate_delta

from duet.agents import DuetEvent, DuetResult, UpstreamTimeout
from duet.agents._events import ContentDelta, Failed, Finished, ReasoningDelta, ToolCall, ToolCallsRequested, Usage
from duet.api.chat._stream import ChunkEncoder, ChunkWriter
from duet.api.chat._fold import CompletionFold
from duet.api._errors import APIError
from duet.api._rendering import Renderer
from tests.conftest import sse_events

ID, CREATED, MODEL = "chatcmpl-test", 1_700_000_000, "duet"
REASONER, ANSWERER = "reasoner", "answerer"
MODES = ("reasoning_content", "think", "hidden")
CALLS = [ToolCall(id="call_a", name="kb.search", arguments='{"q": "weather"}'), ToolCall(id="call_b", name="clock", arguments="{}")]


def stream_of(events: Sequence[DuetEvent], mode: str, legacy: bool, include_usage: bool) -> bytes:
    writer = ChunkWriter(ChunkEncoder(ID, CREATED, MODEL), include_usage)
    renderer = Renderer(writer, mode, legacy)  # type: ignore[arg-type]
    renderer.start()
    out = []
    for event in events:
        renderer.render(event)
        out.append(writer.take())  # as the service writes: after each batch of events (here, each event)
    return b"".join(out)


def body_of(events: Sequence[DuetEvent], mode: str, legacy: bool) -> dict[str, Any] | APIError:
    fold = CompletionFold(ID, CREATED, MODEL)
    renderer = Renderer(fold, mode, legacy)  # type: ignore[arg-type]
    renderer.start()
    for event in events:
        renderer.render(event)
    result = fold.result()
    return result if isinstance(result, APIError) else result.model_dump(mode="json")


def assemble(stream: bytes) -> dict[str, Any]:
    """What a client makes of a stream (parsed as Dify does; deltas merged by the openai SDK's own
    ``accumulate_delta``): a ``chat.completion``, or ``{"error": ...}`` for an error event."""
    events = sse_events(stream)
    head, message, finish_reason, usage = events[0], {}, None, None
    for event in events:
        if event == "[DONE]":
            continue
        if "error" in event:
            assert event is events[-1], "an error event ends the stream"
            return {"error": event["error"]}
        assert (event["id"], event["object"], event["created"], event["model"]) == (ID, "chat.completion.chunk", CREATED, MODEL)
        for choice in event["choices"]:
            message = accumulate_delta(message, copy.deepcopy(choice["delta"]))
            finish_reason = choice["finish_reason"] or finish_reason
        usage = event.get("usage") or usage
    assert events[-1] == "[DONE]" and finish_reason is not None
    for call in message.get("tool_calls", []):
        del call["index"]  # how a delta says which call it continues
    if message.get("tool_calls") or message.get("function_call"):
        message["content"] = message["content"] or None  # a stream opens with content "": a body of only calls has null
    completion = {"id": head["id"], "object": "chat.completion", "created": head["created"], "model": head["model"],
                  "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}]}
    if usage is not None:
        completion["usage"] = usage
    return completion


def assert_one_story(events: Sequence[DuetEvent], mode: str, legacy: bool, include_usage: bool) -> dict[str, Any]:
    """The stream and the body agree; returns the body (the error body of a failed run)."""
    assembled = assemble(stream_of(events, mode, legacy, include_usage))
    body = body_of(events, mode, legacy)
    if isinstance(body, APIError):
        assert assembled == body.body()
        return body.body()
    if not include_usage:
        assert "usage" not in assembled
        assembled["usage"] = body["usage"]
    assert assembled == body
    return body


def a_run(ending: str, interleaved: bool = False) -> list[DuetEvent]:
    """The events of a typical run: the reasoner thinks, the answer model thinks too and answers;
    ``ending``: ``stop``, ``tool_calls`` (two client calls) or ``failure`` (mid-answer)."""
    events: list[DuetEvent] = [
        ReasoningDelta(text="Plan: ", source=REASONER),
        ReasoningDelta(text="look it up.", source=REASONER),
        Usage(source=REASONER, prompt_tokens=10, completion_tokens=2),
        ReasoningDelta(text="My own thought.", source=ANSWERER),
        ContentDelta(text="It is "),
    ]
    if interleaved:  # a service-tool round: its progress lines are reasoning, between answer texts
        events += [ReasoningDelta(text="\n[calling lookup {}]\n", source=ANSWERER), ReasoningDelta(text="[lookup returned]\n", source=ANSWERER),
                   Usage(source=ANSWERER, prompt_tokens=7, completion_tokens=1)]
    events += [ContentDelta(text='"18°C" ü\n</think>'), ContentDelta(text=""), Usage(source=ANSWERER, prompt_tokens=20, completion_tokens=5)]
    if ending == "tool_calls":
        events += [ToolCallsRequested(calls=CALLS), Finished(finish_reason="tool_calls")]
    elif ending == "failure":
        events += [Failed(message="timed out", error=UpstreamTimeout("answer qwen timed out"))]
    else:
        events += [Finished(finish_reason="stop")]
    return events


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("legacy", [False, True], ids=["tools", "legacy"])
@pytest.mark.parametrize("include_usage", [False, True], ids=["", "usage"])
@pytest.mark.parametrize("ending", ["stop", "tool_calls", "failure"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["", "service-round"])
def test_the_stream_tells_the_story_of_the_body(mode: str, legacy: bool, include_usage: bool, ending: str, interleaved: bool) -> None:
    assert_one_story(a_run(ending, interleaved), mode, legacy, include_usage)


def message_of(body: dict[str, Any]) -> dict[str, Any]:
    return body["choices"][0]["message"]  # type: ignore[no-any-return]


def test_reasoning_content_mode() -> None:
    body = assert_one_story(a_run("stop"), "reasoning_content", False, True)
    # The answer model's thinking starts a new paragraph after the reasoner's.
    assert message_of(body) == {"role": "assistant", "content": 'It is "18°C" ü\n</think>', "reasoning_content": "Plan: look it up.\n\nMy own thought."}
    assert body["choices"][0]["finish_reason"] == "stop"
    # The sum of every model call; the reasoner's output tokens are the reasoning tokens.
    assert body["usage"] == {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37, "completion_tokens_details": {"reasoning_tokens": 2}}


def test_think_mode_writes_reasoning_as_a_block_in_the_content() -> None:
    body = assert_one_story(a_run("stop"), "think", False, False)
    assert message_of(body) == {"role": "assistant", "content": '<think>\nPlan: look it up.\n\nMy own thought.\n</think>\n\nIt is "18°C" ü\n</think>'}
    # Reasoning after answer text (a service-tool round) opens a block of its own.
    body = assert_one_story(a_run("stop", interleaved=True), "think", False, False)
    assert message_of(body)["content"] == ('<think>\nPlan: look it up.\n\nMy own thought.\n</think>\n\nIt is '
                                           '<think>\n\n[calling lookup {}]\n[lookup returned]\n\n</think>\n\n"18°C" ü\n</think>')


def test_think_block_is_closed_before_tool_calls_the_end_and_an_error() -> None:
    reasoning_only = [ReasoningDelta(text="hm", source=REASONER)]
    for ending in ([Finished(finish_reason="stop")], [ToolCallsRequested(calls=CALLS[:1]), Finished(finish_reason="tool_calls")]):
        assert message_of(assert_one_story(reasoning_only + ending, "think", False, True))["content"] == "<think>\nhm\n</think>\n\n"
    failed = reasoning_only + [Failed(message="t", error=UpstreamTimeout("t"))]
    contents = [event["choices"][0]["delta"].get("content") for event in sse_events(stream_of(failed, "think", False, False))[:-1]]
    assert contents == ["", "<think>\nhm", "\n</think>\n\n"]


def test_hidden_mode_shows_no_reasoning() -> None:
    for ending in ("stop", "tool_calls"):
        stream = stream_of(a_run(ending, interleaved=True), "hidden", False, True)
        assert b"reasoning_content" not in stream and b"think>\\n" not in stream and b"calling lookup" not in stream
        assert "reasoning_content" not in message_of(assert_one_story(a_run(ending), "hidden", False, True))


def test_tool_calls() -> None:
    body = assert_one_story(a_run("tool_calls"), "hidden", False, True)
    assert message_of(body)["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "kb.search", "arguments": '{"q": "weather"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
    ]
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    calls_only = [ToolCallsRequested(calls=CALLS), Finished(finish_reason="tool_calls")]
    assert message_of(assert_one_story(calls_only, "reasoning_content", False, True))["content"] is None


def test_legacy_clients_get_one_function_call() -> None:
    body = assert_one_story(a_run("tool_calls"), "reasoning_content", True, True)
    message = message_of(body)
    assert message["function_call"] == {"name": "kb.search", "arguments": '{"q": "weather"}'} and "tool_calls" not in message
    assert body["choices"][0]["finish_reason"] == "function_call"
    calls_only = [ToolCallsRequested(calls=CALLS), Finished(finish_reason="tool_calls")]
    assert message_of(assert_one_story(calls_only, "reasoning_content", True, False)) == {
        "role": "assistant", "content": None, "function_call": {"name": "kb.search", "arguments": '{"q": "weather"}'}}


def test_usage_chunk_only_when_asked_for() -> None:
    asked = sse_events(stream_of(a_run("stop"), "reasoning_content", False, True))
    assert asked[-2]["choices"] == [] and asked[-2]["usage"] == {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37,
                                                                    "completion_tokens_details": {"reasoning_tokens": 2}}
    assert asked[-3]["choices"][0]["finish_reason"] == "stop" and "usage" not in asked[-3]  # AutoGen ignores a finish that carries usage
    assert not any("usage" in event for event in sse_events(stream_of(a_run("stop"), "reasoning_content", False, False))[:-1])


def test_a_failure_is_one_error_event_and_the_error_body() -> None:
    events = sse_events(stream_of(a_run("failure"), "reasoning_content", False, True))
    assert events[-1]["error"]["code"] == "upstream_timeout" and "[DONE]" not in events
    body = body_of(a_run("failure"), "reasoning_content", False)
    assert isinstance(body, APIError) and body.status == 504


def test_a_batch_is_written_at_once() -> None:
    """The writer keeps what a batch of events makes until it is taken: one write per batch."""
    writer = ChunkWriter(ChunkEncoder(ID, CREATED, MODEL), include_usage=False)
    renderer = Renderer(writer, "reasoning_content", False)
    renderer.start()
    for event in a_run("stop"):
        renderer.render(event)
    whole = writer.take()
    assert writer.take() == b""
    assert whole == stream_of(a_run("stop"), "reasoning_content", False, False)


# ---- Any run ---------------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
DELTA = st.one_of(
    st.builds(ReasoningDelta, text=TEXT, source=st.sampled_from([REASONER, ANSWERER])),
    st.builds(ContentDelta, text=TEXT),
    st.builds(Usage, source=st.just(ANSWERER), prompt_tokens=st.integers(0, 500), completion_tokens=st.integers(0, 500)),
)
CALL = st.builds(ToolCall, id=st.text(min_size=1, max_size=8), name=TEXT.filter(bool), arguments=TEXT)
ENDING = st.one_of(
    st.sampled_from(["stop", "length", "content_filter"]).map(lambda reason: [Finished(finish_reason=reason)]),
    st.lists(CALL, min_size=1, max_size=3).map(lambda calls: [ToolCallsRequested(calls=calls), Finished(finish_reason="tool_calls")]),
    st.just([Failed(message="t", error=UpstreamTimeout("answer m timed out"))]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(DELTA, max_size=14), ENDING, st.sampled_from(MODES), st.booleans(), st.booleans())
def test_any_run_tells_one_story(deltas: list[DuetEvent], ending: list[DuetEvent], mode: str, legacy: bool, include_usage: bool) -> None:
    events = deltas + ending
    assert_one_story(events, mode, legacy, include_usage)
    # No empty text goes out: every text chunk but the opening one carries something.
    for event in sse_events(stream_of(events, mode, legacy, include_usage))[1:]:
        if event != "[DONE]" and event.get("choices"):
            delta = event["choices"][0]["delta"]
            assert delta.get("content") != "" and delta.get("reasoning_content") != "", delta


@settings(max_examples=200, deadline=None)
@given(st.lists(DELTA, max_size=14), ENDING.filter(lambda ending: not isinstance(ending[-1], Failed)))
def test_the_body_says_what_the_python_api_collects(deltas: list[DuetEvent], ending: list[DuetEvent]) -> None:
    """``DuetResult`` (the Python API's collected run) and the HTTP body read the events alike."""
    events = deltas + ending
    body = body_of(events, "reasoning_content", False)
    assert not isinstance(body, APIError)
    result = DuetResult.of(events)
    message = message_of(body)
    assert message.get("reasoning_content", "") == result.reasoning
    assert (message["content"] or "") == result.content
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])] == [
        (c.id, c.name, c.arguments) for c in result.tool_calls]
    assert body["usage"]["prompt_tokens"] == result.prompt_tokens and body["usage"]["completion_tokens"] == result.completion_tokens
    assert body["choices"][0]["finish_reason"] == result.finish_reason


def test_the_body_is_a_chat_completion_to_the_openai_sdk() -> None:
    from openai.types.chat import ChatCompletion

    for legacy in (False, True):
        body = body_of(a_run("tool_calls"), "reasoning_content", legacy)
        assert not isinstance(body, APIError)
        parsed = ChatCompletion.model_validate(body)
        assert json.loads(parsed.model_dump_json(exclude_unset=True)) == body
