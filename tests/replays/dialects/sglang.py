"""SGLang's OpenAI-compatible server (``python -m sglang.launch_server --reasoning-parser …``).

Sources (sgl-project/sglang):
- python/sglang/srt/entrypoints/openai/serving_chat.py ``_process_tool_call_id``: ``call_`` + 24
  hex (uuid4), or ``functions.{name}:{n}`` with the ``kimi_k2`` parser.
- python/sglang/srt/entrypoints/openai/serving_base.py: request ids ``chatcmpl-<uuid4>``; a failure
  is ``ErrorResponse(object="error", message, type, param, code)`` — a flat object, not wrapped in
  ``error`` — and in a stream ``data: {"error": <that object>}``.
- Docs https://docs.sglang.io/advanced_features/separate_reasoning.html: reasoning goes to
  ``reasoning_content`` (deepseek-r1, qwen3, … parsers).

Best readings: chunks are dumped without excluding unset fields, so deltas carry ``null`` for what
they lack (``reasoning_content``, ``tool_calls``) and later tool-call fragments repeat ``id: null``
and ``name: null``; choices carry ``matched_stop``; the server answers whatever model name it is
sent; ``[DONE]`` follows a mid-stream error; usage only with ``include_usage`` on a ``choices: []``
chunk.
"""

from __future__ import annotations

import uuid
from typing import Iterator

from ..dialect import DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, sse
from ..scenario import Call, Failure


class SGLang(Dialect):
    name = "sglang"
    title = "SGLang"
    default_models = ("Qwen/Qwen3-8B",)
    thinking_models = ("Qwen3", "DeepSeek-R1", "QwQ")
    ignores_model = True
    retry_after = None

    def completion_id(self) -> str:
        return f"chatcmpl-{uuid.uuid4()}"

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "call_" + uuid.uuid4().hex[:24]

    def chunk(self, reply: Reply, delta: JSON, finish: str | None = None, **top: object) -> bytes:
        full = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None, **delta}
        choice = {"index": 0, "delta": full, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        return sse({**self.chunk_head(reply), "choices": [choice], "usage": None, **top})

    def call_deltas(self, reply: Reply, index: int, call_id: str, call: Call) -> Iterator[JSON]:
        yield {"id": call_id, "index": index, "type": "function", "function": {"name": call.name, "arguments": ""}}
        for fragment in call.fragments():
            yield {"id": None, "index": index, "type": "function", "function": {"name": None, "arguments": fragment}}

    def error_body(self, status: int, kind: str, message: str) -> JSON:
        return {"object": "error", "message": message, "type": kind, "param": None, "code": status}

    def error(self, failure: Failure, model: str) -> HttpError:
        status, kind, message = {
            "rate_limit": (429, "RateLimitError", "Too many requests."),
            "bad_request": (400, "BadRequestError", "The input (9000 tokens) is longer than the model's context length (8192 tokens)."),
            "model_not_found": (404, "NotFoundError", f"The model `{model}` does not exist."),
            "server_error": (500, "InternalServerError", "Internal server error: CUDA out of memory"),
        }[failure.kind]
        return HttpError.of(status, self.error_body(status, kind, message), {"Retry-After": "2"} if status == 429 else None)

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        yield sse({"error": self.error_body(500, "InternalServerError", "Internal server error: CUDA out of memory")})
        yield DONE
