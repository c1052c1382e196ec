"""Alibaba Cloud Model Studio (DashScope) compatible mode, Qwen's home
(``https://dashscope.aliyuncs.com/compatible-mode/v1``). Picked because Tongyi/Qwen is one of
Dify's built-in providers and the most configured model family among its users in China.

Sources:
- The Function Calling guide's streamed example (qwen-plus, quoted verbatim at
  bioinfo.online/articleList/2026161174.html and itsvse.com tid=10981): the first tool-call chunk
  has ``index``, ``id``, ``type`` and the name with the first argument fragment; every later
  fragment repeats ``"id": ""`` and ``"type": "function"`` (and may be ``"function": {}``); the
  finish chunk is ``delta: {}`` with ``finish_reason: "tool_calls"``; every chunk carries
  ``"usage": null`` and ``"system_fingerprint": null``.
- https://help.aliyun.com/en/model-studio/error-code: "parameter.enable_thinking must be set to
  false for non-streaming calls" (400 InvalidParameter) — a thinking call must stream.
- The deep-thinking guide: reasoning in ``reasoning_content``; Qwen3 commercial models think when
  ``enable_thinking`` is true, QwQ and ``*-thinking`` models always.

Best readings: usage only with ``include_usage``, on a ``choices: []`` chunk; the error object adds
``request_id``; an unknown model is 404 ``model_not_found``; a failure mid-stream ends the body.
"""

from __future__ import annotations

import uuid
from typing import Iterator

from ..dialect import JSON, Dialect, HttpError, Ledger, Reply, Write, random_text, sse
from ..scenario import Call


class DashScope(Dialect):
    name = "dashscope"
    title = "DashScope / Qwen (compatible mode)"
    default_models = ("qwen-plus", "qwen-max", "qwen3-235b-a22b-thinking-2507", "qwq-plus")
    retry_after = None

    def thinks(self, model: str, body: JSON) -> bool:
        return "thinking" in model or model.startswith("qwq") or bool(body.get("enable_thinking"))

    def completion_id(self) -> str:
        return f"chatcmpl-{uuid.uuid4()}"

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "call_" + random_text("0123456789abcdef", 22)

    def chunk(self, reply: Reply, delta: JSON, finish: str | None = None, **top: object) -> bytes:
        choice = {"delta": delta, "finish_reason": finish, "index": 0, "logprobs": None}
        return sse({"choices": [choice], "object": "chat.completion.chunk", "usage": None, "created": reply.created,
                    "system_fingerprint": None, "model": reply.model, "id": reply.completion_id, **top})

    def opening(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"content": "", "role": "assistant"} if not reply.turn.reasoning
                         else {"content": None, "role": "assistant", "reasoning_content": ""})

    def call_deltas(self, reply: Reply, index: int, call_id: str, call: Call) -> Iterator[JSON]:
        fragments = call.fragments()
        yield {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": fragments[0]}}
        for fragment in fragments[1:]:
            yield {"function": {"arguments": fragment}, "index": index, "id": "", "type": "function"}
        yield {"function": {}, "index": index, "id": "", "type": "function"}

    def tool_call_chunks(self, reply: Reply) -> Iterator[Write]:
        for index, call_id, call in reply.calls():
            for delta in self.call_deltas(reply, index, call_id, call):
                yield self.chunk(reply, {"content": None, "tool_calls": [delta]})

    def error_object(self, status: int, kind: str, code: object, message: str) -> JSON:
        return {"error": {"code": code, "param": None, "message": message, "type": kind},
                "id": f"chatcmpl-{uuid.uuid4()}", "request_id": str(uuid.uuid4())}

    errors = {
        "rate_limit": (429, "limit_requests", "limit_requests", "Requests rate limit exceeded, please try again later."),
        "bad_request": (400, "invalid_request_error", "invalid_parameter_error",
                        "Range of input length should be [1, 129024]"),
        "server_error": (500, "internal_error", "internal_error", "An internal error has occured, please try again later."),
        "model_not_found": (404, "invalid_request_error", "model_not_found",
                            "The model `{model}` does not exist or you do not have access to it."),
    }

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        if body.get("enable_thinking") and not body.get("stream"):
            message = "parameter.enable_thinking must be set to false for non-streaming calls"
            return HttpError.of(400, self.error_object(400, "invalid_request_error", "invalid_parameter_error", message))
        return None
