"""``count_tokens``' estimate (``api/messages/_tokens.py``)."""

from __future__ import annotations

import json

from duet.api.messages._reader import read_input
from duet.api.messages._tokens import estimate_input_tokens

from tests.messages_parts import messages_request


def test_the_token_estimate_is_four_characters_a_token() -> None:
    wire = messages_request(system="x" * 400, messages=[
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
