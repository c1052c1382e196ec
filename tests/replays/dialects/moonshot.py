"""Moonshot AI / Kimi (``https://api.moonshot.cn/v1``, ``https://api.moonshot.ai/v1``). Picked
because Moonshot is a Dify built-in provider and Kimi K2's thinking models are a common reasoner.

Sources:
- Kimi's tool-use guide on streaming (quoted at itsvse.com tid=10981): the first chunk of a call
  names ``tool_call.id`` and ``function.name``; later chunks carry only ``function.arguments``;
  several calls are told apart by ``index``.
- The refusal, captured in bytedance/deer-flow#3043, continuedev/continue#11711,
  CherryHQ/cherry-studio#12619, earendil-works/pi#4251: HTTP 400 ``{"error": {"message":
  "thinking is enabled but reasoning_content is missing in assistant tool call message at index
  N", "type": "invalid_request_error"}}`` (N counts all messages from 0); an empty string counts as
  missing (pi#4251).
- caudena/beam_weaver v0.1.12 release note: stream usage sits in the final chunk's
  ``choices[0].usage`` (the documented shape), not at the top level.
- vLLM/SGLang ``kimi_k2`` id format (``functions.{name}:{n}``, n counting every tool call of the
  conversation), which mirrors Moonshot's own.

Best readings: ``reasoning_content`` for the K2 thinking models (kimi-k2-thinking, kimi-k2.5,
kimi-k2.6) and none for moonshot-v1; 429 ``rate_limit_reached_error``; an unknown model is 404
``resource_not_found_error``; a failure mid-stream ends the body.
"""

from __future__ import annotations

from typing import Iterator

from ..dialect import DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, assistant_tool_turns, sse
from ..scenario import Call


class Moonshot(Dialect):
    name = "moonshot"
    title = "Moonshot / Kimi"
    default_models = ("kimi-k2.6", "kimi-k2.5", "kimi-k2-thinking", "moonshot-v1-8k")
    thinking_models = ("kimi-k2.6", "kimi-k2.5", "thinking")
    errors = {
        "rate_limit": (429, "rate_limit_reached_error", None,
                       "Your account org-01 request reached organization max RPM: 3, please try again after 20 seconds"),
        "bad_request": (400, "invalid_request_error", None, "Invalid request: Your request exceeded model token limit: 262144"),
        "server_error": (500, "server_error", None, "Internal server error"),
        "model_not_found": (404, "resource_not_found_error", None, "Not found the model {model} or Permission denied"),
    }
    retry_after = None

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return f"functions.{call.name}:{ledger.history_count(body) + index}"

    def call_deltas(self, reply: Reply, index: int, call_id: str, call: Call) -> Iterator[JSON]:
        fragments = call.fragments()
        yield {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": fragments[0]}}
        for fragment in fragments[1:]:
            yield {"index": index, "function": {"arguments": fragment}}

    def closing(self, reply: Reply) -> Iterator[Write]:
        choice = {"index": 0, "delta": {}, "finish_reason": self.finish_reason(reply), "usage": self.usage(reply)}
        yield sse({**self.chunk_head(reply), "choices": [choice]})
        yield DONE

    def error_object(self, status: int, kind: str, code: object, message: str) -> JSON:
        return {"error": {"message": message, "type": kind}}

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        if not self.thinks(str(body.get("model", "")), body):
            return None
        for index, message in assistant_tool_turns(body):
            if not message.get("reasoning_content"):
                message_text = f"thinking is enabled but reasoning_content is missing in assistant tool call message at index {index}"
                return HttpError.of(400, self.error_object(400, "invalid_request_error", None, message_text))
        return None
