"""``POST /v1/messages/count_tokens``: an estimate of what a request costs, made here, never by a model.

No tokenizer is at hand (tokenizer files cannot be fetched at run time, and the pipeline's models
are any OpenAI-compatible servers, each with its own), so the estimate is the rule Duet's model
client uses for its own ``count_tokens``: **four characters a token**, over what the answer model
would be sent: the conversation as chat messages (text, tool calls with their arguments, tool
results), the client tools' schemas as JSON; plus :data:`TOKENS_PER_MESSAGE` for each message's
framing and :data:`TOKENS_PER_IMAGE` for each image (its base64 text would count it many times over).
``thinking`` blocks and Anthropic's own tools are left out, as they are from the model's input.

>>> estimate_input_tokens([{"role": "user", "content": "What is the weather in Paris today?"}], [])
13
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from duet.workbenches import ProxyTool

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
TOKENS_PER_IMAGE = 1600
"""About what one image costs an Anthropic model after it is scaled to at most 1.15 megapixels."""


def estimate_input_tokens(chat_messages: Sequence[dict[str, Any]], tools: Sequence[ProxyTool]) -> int:
    """The estimate for a conversation (as OpenAI chat messages) and its client tools."""
    chars = 0
    images = 0
    for message in chat_messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    chars += len(part["text"])
                else:
                    images += 1
        for call in message.get("tool_calls", ()):
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"])
    chars += sum(len(json.dumps(tool.schema, ensure_ascii=False)) for tool in tools)
    return -(-chars // CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(chat_messages) + TOKENS_PER_IMAGE * images
