"""Ollama's OpenAI-compatible endpoint (``http://localhost:11434/v1``).

Sources (ollama/ollama, read at fb30760):
- openai/openai.go: ``Delta`` fields all ``omitempty`` (role only on the first chunk, reasoning in
  ``reasoning``; content is kept even when ""); ``ToStreamChunks`` splits a response that has both
  thinking and content/tool calls into two chunks; ``ToToolCalls`` emits each tool call whole (id,
  index, name, the complete JSON arguments) and all the calls of one model response in one chunk;
  ``FinishChunk`` sends an empty delta with ``finish_reason`` (``stop`` becomes ``tool_calls`` after
  a tool call); ``system_fingerprint: "fp_ollama"``; ``NewError`` gives ``{"error": {message, type,
  param: null, code: null}}`` with type ``invalid_request_error`` (400), ``not_found_error`` (404),
  else ``api_error``; ``FromCompletionToolCall`` refuses a follow-up whose tool-call arguments are
  not JSON ("invalid tool call arguments", 400).
- middleware/openai.go ``ChatWriter``: with ``stream_options.include_usage`` the finish chunk is
  followed by a copy with ``choices: []`` and usage, then ``[DONE]``; the chunk id is
  ``chatcmpl-<0..998>``.
- server/routes.go: ``toolCallId`` is ``call_`` + 8 of [a-z0-9]; an unknown model is 404 "model
  'x' not found"; a failure after the stream began is written as ``{"error": "..."}`` into the
  stream, which the ChatWriter (status already 200) decodes as an empty response: a chunk with
  ``content: ""`` and no finish reason, then the body ends with no ``[DONE]``.

Best reading: a full queue answers 503 "server busy, please try again.  maximum pending requests
exceeded" (Ollama has no 429); the replay plays that for ``rate_limit``.
"""

from __future__ import annotations

import json
import random
import string
from typing import Iterator

from ..dialect import DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, assistant_tool_turns, random_text, sse
from ..scenario import Call, Failure


class Ollama(Dialect):
    name = "ollama"
    title = "Ollama (/v1)"
    default_models = ("qwen3:8b", "deepseek-r1:8b", "llama3.2:latest", "gpt-oss:20b")
    thinking_models = ("qwen3", "deepseek-r1", "gpt-oss")
    retry_after = None

    def completion_id(self) -> str:
        return f"chatcmpl-{random.randrange(999)}"

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "call_" + random_text(string.ascii_lowercase + string.digits, 8)

    def chunk_head(self, reply: Reply) -> JSON:
        head = super().chunk_head(reply)
        return {**head, "system_fingerprint": "fp_ollama"}

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "finish_reason": finish}

    def reasoning_delta(self, reply: Reply, piece: str) -> JSON:
        return {"reasoning": piece}

    def reasoning_fields(self, reply: Reply, text: str) -> JSON:
        return {"reasoning": text}

    def content_delta(self, reply: Reply, piece: str) -> JSON:
        return {"content": piece}

    def tool_call_chunks(self, reply: Reply) -> Iterator[Write]:
        if reply.turn.calls:  # the whole calls of one response, in one chunk
            calls = [{**self.whole_call(reply, index, call_id, call), "index": index} for index, call_id, call in reply.calls()]
            yield self.chunk(reply, {"content": "", "tool_calls": calls})

    def closing(self, reply: Reply) -> Iterator[Write]:
        finish = self.finish_reason(reply)
        yield self.chunk(reply, {}, finish)
        if reply.include_usage:
            yield sse({**self.chunk_head(reply), "choices": [], "usage": self.usage(reply)})
        yield DONE

    def usage(self, reply: Reply) -> JSON:  # ToUsage: three counts, no details
        prompt, completion = reply.prompt_tokens, reply.completion_tokens
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def error(self, failure: Failure, model: str) -> HttpError:
        if failure.kind == "model_not_found":
            return HttpError.of(404, _error(404, f"model '{model}' not found"))
        if failure.kind == "rate_limit":
            return HttpError.of(503, _error(503, "server busy, please try again.  maximum pending requests exceeded"))
        if failure.kind == "bad_request":
            return HttpError.of(400, _error(400, "invalid message format"))
        return HttpError.of(500, _error(500, "an error was encountered while running the model: unexpected EOF"))

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"content": ""})  # then the body ends, with no finish reason and no [DONE]

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        for _, message in assistant_tool_turns(body):
            for call in message["tool_calls"]:
                try:
                    json.loads((call.get("function") or {}).get("arguments") or "")
                except ValueError:
                    return HttpError.of(400, _error(400, "invalid tool call arguments"))
        return None

    def models(self, served: list[str]) -> JSON:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "library"} for m in served]}


def _error(status: int, message: str) -> JSON:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
