"""The Anthropic Messages protocol's parts, without a server: one renderer, two writers (the event
stream, assembled by the anthropic SDK's own accumulator, is the ``message`` built from the same
events); the byte encoder against the wire models; the reader (Anthropic request → conversation,
client tools, options); the error mapping; the token estimate."""

from __future__ import annotations

import json
from typing import Any, Sequence

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage, SystemMessage, UserMessage
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from duet.agents import DuetEvent, UpstreamStatusError, UpstreamTimeout, UpstreamUnreachable
from duet.agents._conversation import ImageURL
from duet.agents._events import ContentDelta, Finished, ReasoningDelta, ToolCall, ToolCallsRequested, Usage
from duet.api._errors import APIError, as_api_error
from duet.api.messages._errors import error_body
from duet.api.messages._fold import MessageFold
from duet.api.messages._reader import read_input
from duet.api.messages._stream import MessageStreamWriter
from duet.api.messages._tokens import estimate_input_tokens
from duet.api.messages._protocol import Message, MessagesRequest, thinking_signature
from duet.api._options import answer_options as options_for
from duet.api.messages._reader import asked_options
from duet.api.messages._service import parse_messages
from duet.api._settings import ServiceOptions
from duet.api.messages._stream import PING
from duet.api._rendering import Renderer
from duet.workbenches import model_safe_name
from tests.test_rendering import a_run

ID, MODEL = "msg_test", "claude-sonnet-4-5"
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


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "status", "kind"), [
    (APIError(400, "messages.0.content: bad"), 400, "invalid_request_error"),
    (APIError(401, "Missing API key"), 401, "authentication_error"),
    (APIError(404, "The model 'x' does not exist"), 404, "not_found_error"),
    (APIError(413, "too large"), 413, "request_too_large"),
    (UpstreamStatusError("slow down", upstream_status=429), 429, "rate_limit_error"),
    (UpstreamStatusError("boom", upstream_status=500), 502, "api_error"),
    (UpstreamUnreachable("cannot connect"), 503, "overloaded_error"),
    (UpstreamTimeout("silent"), 504, "api_error"),
    (RuntimeError("a bug"), 500, "api_error"),
])
def test_errors_map_to_the_anthropic_types(error: Exception, status: int, kind: str) -> None:
    api_error = as_api_error(error)
    assert api_error.status == status
    assert error_body(api_error) == {"type": "error", "error": {"type": kind, "message": api_error.detail.message}}


# ---- the reader --------------------------------------------------------------------------------


def request(**fields: Any) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}], **fields})


def test_a_tool_round_trip_becomes_calls_and_results() -> None:
    wire = request(
        system=[{"type": "text", "text": "You are a CLI.", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "Be brief."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "List files"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run ls.", "signature": "abc"},
                {"type": "redacted_thinking", "data": "xyz"},
                {"type": "text", "text": "Running it."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_2", "name": "mcp.fs/read", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.txt"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "denied", "is_error": True},
                {"type": "text", "text": "Go on."},
            ]},
        ],
    )
    conversation = read_input(wire).conversation
    assert [type(m) for m in conversation] == [SystemMessage, UserMessage, AssistantMessage, FunctionExecutionResultMessage, UserMessage]
    assert conversation[0].content == "You are a CLI.\n\nBe brief."
    assistant = conversation[2]
    assert assistant.thought == "Running it."  # the thinking blocks are gone
    assert assistant.content == [FunctionCall(id="toolu_1", name="Bash", arguments='{"command": "ls"}'),
                                 FunctionCall(id="toolu_2", name=model_safe_name("mcp.fs/read"), arguments="{}")]
    results = conversation[3].content
    assert [(r.call_id, r.content, r.is_error) for r in results] == [("toolu_1", "a.txt", False), ("toolu_2", "Error: denied", True)]
    assert conversation[4].content == "Go on."


def test_a_tool_result_block_of_another_type_is_passed_on_as_its_json() -> None:
    """Claude Code's tool search answers with ``tool_reference`` blocks; every tool is the model's already."""
    wire = request(messages=[
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "cron"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "tool_reference", "tool_name": "CronCreate"}]}]},
    ])
    [result] = read_input(wire).conversation[-1].content
    assert json.loads(result.content) == {"type": "tool_reference", "tool_name": "CronCreate"}


def test_claude_codes_system_message_inside_messages_and_images() -> None:
    wire = request(messages=[
        {"role": "system", "content": "Project rules."},
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            {"type": "text", "text": "What is this?", "cache_control": {"type": "ephemeral"}},
        ]},
    ])
    system, user = read_input(wire).conversation
    assert isinstance(system, SystemMessage) and system.content == "Project rules."
    first, second, text = user.content
    assert isinstance(first, ImageURL) and first.url == "data:image/png;base64,iVBORw0KGgo="
    assert isinstance(second, ImageURL) and second.url == "https://example.com/cat.jpg"
    assert text == "What is this?"


def test_client_tools_come_from_input_schema_and_anthropics_own_tools_are_dropped() -> None:
    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    wire = request(tools=[
        {"name": "Bash", "description": "Run a command", "input_schema": schema, "cache_control": {"type": "ephemeral"}},
        {"name": "mcp__github__create_issue_with_a_name_that_is_longer_than_sixty_four_characters", "input_schema": {"type": "object"},
         "defer_loading": True},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    ])
    tools = read_input(wire).tools
    assert [tool.client_name for tool in tools] == ["Bash", "mcp__github__create_issue_with_a_name_that_is_longer_than_sixty_four_characters"]
    assert tools[0].schema == {"name": "Bash", "description": "Run a command", "parameters": schema}
    assert len(tools[1].name) <= 64


@pytest.mark.parametrize(("fields", "param"), [
    ({"messages": [{"role": "user", "content": []}]}, "messages.0.content"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}, "messages.0.content.0.source"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}, "messages.0.content.0.tool_use_id"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}]},
     "messages.0.content.0.input"),
    ({"system": [{"type": "image"}]}, "system.0.type"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"tools": [{"name": "f", "input_schema": {"type": "array"}}]}, "tools.0.input_schema"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}}, {"name": "f", "input_schema": {"type": "object"}}]}, "tools"),
])
def test_unusable_input_is_a_400_naming_the_param(fields: dict[str, Any], param: str) -> None:
    body = {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}], **fields}
    with pytest.raises(APIError) as raised:  # by the request model (a tool schema) or by the reader
        parse_messages(json.dumps(body).encode(), ServiceOptions())
    assert raised.value.status == 400 and raised.value.detail.param == param, raised.value.detail


def answer_options(wire: MessagesRequest, tools: list[Any], service_tool_names: set[str]) -> Any:
    """The answer model's options of a Messages request: its mapping, then the one options path."""
    return options_for(asked_options(wire), tools, service_tool_names)[0]


def test_answer_options() -> None:
    tools = read_input(request(tools=[{"name": "Read", "input_schema": {"type": "object"}}])).tools
    wire = request(temperature=0.2, top_p=0.9, top_k=40, stop_sequences=["END"], metadata={"user_id": "u1"},
                   tool_choice={"type": "any", "disable_parallel_tool_use": True}, thinking={"type": "adaptive"})
    options = answer_options(wire, tools, set())
    assert options.tool_choice == "required"
    assert options.create_args == {"max_tokens": 1024, "temperature": 0.2, "top_p": 0.9, "stop": ["END"], "user": "u1",
                                   "parallel_tool_calls": False}
    assert answer_options(request(tool_choice={"type": "tool", "name": "Read"}), tools, set()).tool_choice == "Read"
    assert answer_options(request(tool_choice={"type": "none"}), tools, set()).tool_choice == "none"
    for choice in ({"type": "tool", "name": "Write"}, {"type": "any"}):
        with pytest.raises(APIError) as raised:
            answer_options(request(tool_choice=choice), tools if choice["type"] == "tool" else [], set())
        assert raised.value.status == 400 and raised.value.detail.param.startswith("tool_choice")  # type: ignore[union-attr]


def test_the_token_estimate_is_four_characters_a_token() -> None:
    wire = request(system="x" * 400, messages=[
        {"role": "user", "content": [{"type": "text", "text": "y" * 40},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 10_000}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "z" * 4000, "signature": "s"},
                                          {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "w" * 80}]},
    ], tools=[{"name": "Read", "input_schema": {"type": "object"}}])
    given = read_input(wire)
    tool_chars = len(json.dumps(given.tools[0].schema))
    chars = 400 + 40 + len("Read") + len('{"path": "a"}') + 80 + tool_chars  # thinking is not counted
    assert estimate_input_tokens(given.chat_messages, given.tools) == -(-chars // 4) + 4 * 4 + 1600
