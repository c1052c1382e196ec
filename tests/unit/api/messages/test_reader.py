"""The Anthropic Messages protocol's reader (``api/messages/_reader.py``): tool rounds, Claude Code's
request shape, client tools, unusable input named by its param."""

from __future__ import annotations

import json
from typing import Any

import pytest
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResultMessage,
    SystemMessage,
    UserMessage,
)
from duet.agents._conversation import ImageURL
from duet.api._errors import APIError
from duet.api._settings import ServiceOptions
from duet.api.messages._reader import read_input
from duet.api.messages._service import parse_messages
from duet.workbenches import model_safe_name

from tests.messages_parts import MODEL, messages_request


def test_a_tool_round_trip_becomes_calls_and_results() -> None:
    wire = messages_request(
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
    wire = messages_request(messages=[
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "cron"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "tool_reference", "tool_name": "CronCreate"}]}]},
    ])
    [result] = read_input(wire).conversation[-1].content
    assert json.loads(result.content) == {"type": "tool_reference", "tool_name": "CronCreate"}


def test_claude_codes_system_message_inside_messages_and_images() -> None:
    wire = messages_request(messages=[
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
    wire = messages_request(tools=[
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
