"""The one ``answer_options`` path (``api/_options.py``): a Messages request's options."""

from __future__ import annotations

from typing import Any

import pytest
from duet.api._errors import APIError
from duet.api._options import answer_options as options_for
from duet.api.messages._protocol import MessagesRequest
from duet.api.messages._reader import asked_options, read_input

from tests.messages_parts import messages_request


def answer_options(wire: MessagesRequest, tools: list[Any], service_tool_names: set[str]) -> Any:
    """The answer model's options of a Messages request: its mapping, then the one options path."""
    return options_for(asked_options(wire), tools, service_tool_names)[0]


def test_answer_options() -> None:
    tools = read_input(messages_request(tools=[{"name": "Read", "input_schema": {"type": "object"}}])).tools
    wire = messages_request(temperature=0.2, top_p=0.9, top_k=40, stop_sequences=["END"], metadata={"user_id": "u1"},
                   tool_choice={"type": "any", "disable_parallel_tool_use": True}, thinking={"type": "adaptive"})
    options = answer_options(wire, tools, set())
    assert options.tool_choice == "required"
    # Every request's options are given all their fields: one set of them serves all (not 728 bytes each).
    assert options.model_fields_set is answer_options(messages_request(), [], set()).model_fields_set
    assert options.create_args == {"max_tokens": 1024, "temperature": 0.2, "top_p": 0.9, "stop": ["END"], "user": "u1",
                                   "parallel_tool_calls": False}
    assert answer_options(messages_request(tool_choice={"type": "tool", "name": "Read"}), tools, set()).tool_choice == "Read"
    assert answer_options(messages_request(tool_choice={"type": "none"}), tools, set()).tool_choice == "none"
    for choice in ({"type": "tool", "name": "Write"}, {"type": "any"}):
        with pytest.raises(APIError) as raised:
            answer_options(messages_request(tool_choice=choice), tools if choice["type"] == "tool" else [], set())
        assert raised.value.status == 400 and raised.value.detail.param.startswith("tool_choice")  # type: ignore[union-attr]
