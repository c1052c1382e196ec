"""What the protocols' wire models share (``api/_wire.py``): a tool list is validated once per content,
each field keeps its own."""

from __future__ import annotations

import json
from typing import Any

import pytest
from duet.workbenches import proxy_tools_from_openai

from tests.core_parts import tool_entry


def test_a_tool_list_is_validated_once_per_content_and_keyed_once() -> None:
    from duet.api._wire import KnownTools
    from duet.api.chat._protocol import ChatCompletionRequest
    from duet.api.chat._reader import client_tools_of
    from pydantic import ValidationError

    def request(*tools: dict[str, Any]) -> tuple[ChatCompletionRequest, dict[str, Any]]:
        body = json.loads(json.dumps({"model": "duet", "messages": [{"role": "user", "content": "Hi"}], "tools": tools}))
        return ChatCompletionRequest.model_validate(body), body

    first, first_body = request(tool_entry("checked_once"), tool_entry("checked_too"))
    second, second_body = request(tool_entry("checked_once"), tool_entry("checked_too"))
    assert isinstance(first.tools, KnownTools) and second.tools is first.tools  # the next request's equal list
    assert client_tools_of(second, second_body) == client_tools_of(first, first_body) == proxy_tools_from_openai(second_body["tools"])
    bad = tool_entry("checked_once")
    bad["function"]["parameters"]["type"] = "string"
    for _ in range(2):  # an invalid list is never kept
        with pytest.raises(ValidationError, match=r"tools.1.function.parameters"):
            request(tool_entry("checked_too"), bad)
    assert request(tool_entry("checked_once"), tool_entry("checked_too"))[0].tools is first.tools


def test_each_field_keeps_its_own_validated_tool_lists() -> None:
    """A list valid as two fields' types (chat tools, legacy functions, Messages tools) is validated as each."""
    from duet.api._wire import FunctionDefinition
    from duet.api.chat._protocol import ChatCompletionRequest, ToolDefinition
    from duet.api.messages._protocol import MessagesRequest
    from duet.api.messages._protocol import ToolDefinition as MessagesTool

    both = [{"type": "function", "function": {"name": "a"}, "name": "b", "input_schema": {"type": "object"}}]
    user = [{"role": "user", "content": "Hi"}]
    functions = ChatCompletionRequest.model_validate({"model": "m", "messages": user, "functions": both}).functions
    tools = ChatCompletionRequest.model_validate({"model": "m", "messages": user, "tools": both}).tools
    anthropic = MessagesRequest.model_validate({"model": "m", "max_tokens": 1, "messages": user, "tools": both}).tools
    assert isinstance(functions[0], FunctionDefinition) and isinstance(tools[0], ToolDefinition)  # type: ignore[index]
    assert isinstance(anthropic[0], MessagesTool)  # type: ignore[index]
