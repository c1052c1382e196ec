"""The Anthropic Messages protocol's writers (``api/messages/_stream.py``, ``_fold.py``), without a server:
one renderer, two writers; the event stream, assembled by the anthropic SDK's own accumulator, is the
``message`` built from the same events."""

from __future__ import annotations

import json
from typing import Any, Sequence

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from duet.agents import DuetEvent
from duet.agents._events import (
    ContentDelta,
    Finished,
    ReasoningDelta,
    ToolCall,
    ToolCallsRequested,
    Usage,
)
from duet.api._errors import APIError
from duet.api._rendering import Renderer
from duet.api.messages._errors import error_body
from duet.api.messages._fold import MessageFold
from duet.api.messages._protocol import Message, thinking_signature
from duet.api.messages._stream import PING, MessageStreamWriter
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tests.messages_parts import ID, MODEL
from tests.unit.api.test_rendering import a_run

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def named_events(raw: bytes) -> list[tuple[str, Any]]:
    """``event: X\\ndata: {...}\\n\\n`` blocks, checked to be framed so, and to name what they carry."""
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: "), block
        name, data = name_line[len("event: "):], json.loads(data_line[len("data: "):])
        assert data["type"] == name, block
        events.append((name, data))
    assert raw.endswith(b"\n\n") or not raw
    return events


def stream_of(events: Sequence[DuetEvent], mode: str = "reasoning_content") -> bytes:
    writer = MessageStreamWriter(ID, MODEL)
    renderer = Renderer(writer, mode, False)  # type: ignore[arg-type]
    renderer.start()
    out = []
    for event in events:
        renderer.render(event)
        out.append(writer.take())  # as the service writes: after each batch of events (here, each event)
    return b"".join(out)


def body_of(events: Sequence[DuetEvent], mode: str = "reasoning_content") -> dict[str, Any] | APIError:
    fold = MessageFold(ID, MODEL)
    renderer = Renderer(fold, mode, False)  # type: ignore[arg-type]
    renderer.start()
    for event in events:
        renderer.render(event)
    result = fold.result()
    return result if isinstance(result, APIError) else result.model_dump(mode="json")


def assemble(stream: bytes) -> dict[str, Any]:
    """What the anthropic SDK makes of the stream (its ``MessageStream`` accumulator): the final
    ``message``, or ``{"error": ...}`` when the stream ends with an error event."""
    snapshot, buffers = None, {}
    events = named_events(stream)
    for position, (name, data) in enumerate(events):
        if name == "error":
            assert position == len(events) - 1, "an error event ends the stream"
            return data
        if name == "ping":
            continue
        snapshot = accumulate_event(event=STREAM_EVENT.validate_python(data), current_snapshot=snapshot, json_bufs=buffers)
    assert events[-1][0] == "message_stop"
    assert snapshot is not None
    return snapshot.model_dump(mode="json", exclude_none=True)


def assert_one_story(events: Sequence[DuetEvent], mode: str = "reasoning_content") -> dict[str, Any]:
    """The stream and the body agree; returns the body (the error body of a failed run)."""
    assembled = assemble(stream_of(events, mode))
    body = body_of(events, mode)
    if isinstance(body, APIError):
        assert assembled == error_body(body)
        return error_body(body)
    assert assembled == json.loads(Message.model_validate(body).model_dump_json(exclude_none=True))
    return body


@pytest.mark.parametrize("mode", ["reasoning_content", "hidden"])
@pytest.mark.parametrize("ending", ["stop", "tool_calls", "failure"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["", "service-round"])
def test_the_stream_tells_the_story_of_the_body(mode: str, ending: str, interleaved: bool) -> None:
    assert_one_story(a_run(ending, interleaved), mode)


def test_the_message_starts_with_the_thinking_then_text_then_tool_uses() -> None:
    body = assert_one_story(a_run("tool_calls"))
    assert [block["type"] for block in body["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, first, second = body["content"]
    assert thinking == {"type": "thinking", "thinking": "Plan: look it up.\n\nMy own thought.", "signature": thinking_signature(ID)}
    assert text == {"type": "text", "text": 'It is "18°C" ü\n</think>'}
    assert first == {"type": "tool_use", "id": "call_a", "name": "kb.search", "input": {"q": "weather"}}
    assert second == {"type": "tool_use", "id": "call_b", "name": "clock", "input": {}}
    assert body["stop_reason"] == "tool_use" and body["stop_sequence"] is None
    assert body["usage"] == {"input_tokens": 30, "output_tokens": 7, "output_tokens_details": {"thinking_tokens": 2}}  # the reasoner's 2
    assert (body["id"], body["type"], body["role"], body["model"]) == (ID, "message", "assistant", MODEL)


def test_reasoning_between_texts_is_a_thinking_block_of_its_own() -> None:
    body = assert_one_story(a_run("stop", interleaved=True))
    assert [block["type"] for block in body["content"]] == ["thinking", "text", "thinking", "text"]
    assert body["stop_reason"] == "end_turn"


def test_hidden_reasoning_is_no_thinking_block() -> None:
    body = assert_one_story(a_run("stop"), "hidden")
    assert [block["type"] for block in body["content"]] == ["text"]


@pytest.mark.parametrize(("finish", "stop_reason"), [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")])
def test_stop_reasons(finish: str, stop_reason: str) -> None:
    body = assert_one_story([ContentDelta(text="Hi"), Finished(finish_reason=finish)])  # type: ignore[arg-type]
    assert body["stop_reason"] == stop_reason


def test_a_call_whose_arguments_are_no_json_object_has_empty_input() -> None:
    calls = [ToolCall(id="call_x", name="f", arguments="[1, 2]"), ToolCall(id="call_y", name="g", arguments='{"a": ')]
    body = assert_one_story([ToolCallsRequested(calls=calls), Finished(finish_reason="tool_calls")])
    assert [block["input"] for block in body["content"]] == [{}, {}]


def test_a_failure_mid_stream_is_one_error_event() -> None:
    stream = stream_of(a_run("failure"))
    name, data = named_events(stream)[-1]
    assert name == "error" and data == {"type": "error", "error": {"type": "api_error", "message": "the upstream model answer qwen timed out"}}
    assert body_of(a_run("failure")).status == 504  # type: ignore[union-attr]


def test_an_empty_answer_is_a_message_without_content() -> None:
    body = assert_one_story([Usage(source="answerer", prompt_tokens=3, completion_tokens=0), Finished(finish_reason="stop")])
    assert body["content"] == [] and body["usage"] == {"input_tokens": 3, "output_tokens": 0}


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.tuples(st.booleans(), TEXT), max_size=8), name=TEXT.filter(bool), arguments=TEXT)
def test_any_text_survives_the_stream(texts: list[tuple[bool, str]], name: str, arguments: str) -> None:
    events: list[DuetEvent] = [ReasoningDelta(text=t, source="r") if thinking else ContentDelta(text=t) for thinking, t in texts]
    events += [ToolCallsRequested(calls=[ToolCall(id="call_1", name=name, arguments=json.dumps({"v": arguments}))]),
               Finished(finish_reason="tool_calls")]
    assert_one_story(events)


def test_ping_is_a_named_event() -> None:
    assert named_events(PING) == [("ping", {"type": "ping"})]
