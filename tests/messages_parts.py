"""What the Anthropic Messages unit tests share: the model and message id they use, and a
``MessagesRequest`` to build on."""

from __future__ import annotations

from typing import Any

from duet.api.messages._protocol import MessagesRequest

ID, MODEL = "msg_test", "claude-sonnet-4-5"


def messages_request(**fields: Any) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}], **fields})
