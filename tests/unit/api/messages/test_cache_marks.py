"""A Messages request's ``cache_control`` marks, where the reader's joins put them (``api/messages/_cache_marks.py``)."""

from __future__ import annotations

from typing import Any

from duet.agents import CacheMark
from duet.workbenches import model_safe_name
from duet.api.messages._cache_marks import cache_marks
from duet.api.messages._protocol import MessagesRequest

EPHEMERAL = {"type": "ephemeral"}


def marks_of(**request: Any) -> list[tuple[str, str]]:
    return [(mark.role, mark.text) for mark in cache_marks(MessagesRequest(model="duet", max_tokens=10, **request))]


def test_system_blocks_join_with_a_blank_line() -> None:
    assert marks_of(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B", "cache_control": EPHEMERAL}],
                    messages=[{"role": "user", "content": "Hi"}]) == [("system", "A\n\nB")]


def test_a_user_turns_text_and_its_tool_results() -> None:
    messages = [
        {"role": "assistant", "content": [{"type": "text", "text": "Calling."},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {}, "cache_control": EPHEMERAL}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "boom"}], "is_error": True,
             "cache_control": EPHEMERAL},
            {"type": "text", "text": "Then "}, {"type": "text", "text": "go on.", "cache_control": EPHEMERAL}]},
    ]
    assert marks_of(messages=messages) == [("assistant", "Calling."), ("tool", "Error: boom"), ("user", "Then go on.")]


def test_a_turn_with_an_image_keeps_its_parts_and_a_mark_on_the_image_is_dropped() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "Look "}, {**image, "cache_control": EPHEMERAL},
                                             {"type": "text", "text": "here.", "cache_control": EPHEMERAL}]}]
    assert marks_of(messages=messages) == [("user", "here.")]


def test_calls_without_text_have_nothing_to_mark_and_tools_are_marked_by_name() -> None:
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}, "cache_control": EPHEMERAL}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]
    tools = [{"name": "my.tool", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}]
    request = MessagesRequest(model="duet", max_tokens=10, messages=messages, tools=tools)
    assert cache_marks(request) == (CacheMark(role="tools", text=model_safe_name("my.tool"), control=EPHEMERAL),)  # the model's name for it
