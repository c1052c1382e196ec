"""The DeepSeek API (``https://api.deepseek.com``).

Sources:
- https://api-docs.deepseek.com/guides/thinking_mode: thinking mode (default on; off with
  ``thinking: {"type": "disabled"}``; ``deepseek-reasoner`` always thinks) returns the chain of
  thought in ``reasoning_content`` beside ``content``; between two user messages, if the model made
  tool calls, the assistant's ``reasoning_content`` must be passed back in every later request —
  otherwise HTTP 400 (the message is the one tests/scripted_upstream.py already replays).
- https://api-docs.deepseek.com/quick_start/rate_limit: while a request waits to be scheduled a
  stream receives SSE keep-alive comments (``: keep-alive``).
- A streamed delta of the official API (quoted in ggml-org/llama.cpp#13867):
  ``{"content":null,"reasoning_content":"Okay"}`` — content is null while it thinks.
- https://api-docs.deepseek.com/quick_start/error_codes: 400 invalid format, 401, 402 insufficient
  balance, 422 invalid parameters, 429 rate limit, 500, 503 overloaded.

Best readings: usage (with ``prompt_cache_hit_tokens``/``prompt_cache_miss_tokens``) rides on the
finish chunk whether or not ``include_usage`` asks; tool calls stream OpenAI's way, ids
``call_0_<uuid4>``; a tool message must answer a call of the assistant message before it (OpenAI's
check); an unknown model is 400 "Model Not Exist"; a failure mid-stream ends the body, no ``[DONE]``.
"""

from __future__ import annotations

import uuid
from typing import Iterator

from ..dialect import DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, assistant_tool_turns, unpaired_tool_message
from ..scenario import Call

MISSING_REASONING = (
    "Missing `reasoning_content` field in the assistant message at message index {index}. For more information, "
    "please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
)


class DeepSeek(Dialect):
    name = "deepseek"
    title = "DeepSeek API"
    default_models = ("deepseek-chat", "deepseek-reasoner", "deepseek-v4-flash", "deepseek-v4-pro")
    errors = {
        "rate_limit": (429, "rate_limit_error", "rate_limit_error", "Rate Limit Reached"),
        "bad_request": (400, "invalid_request_error", "invalid_request_error",
                        "This model's maximum context length is 131072 tokens. However, you requested 140000 tokens."),
        "server_error": (500, "api_error", "internal_error", "Server Error"),
        "model_not_found": (400, "invalid_request_error", "invalid_request_error", "Model Not Exist"),
    }
    retry_after = None

    def thinks(self, model: str, body: JSON) -> bool:
        if model == "deepseek-reasoner":
            return True
        if model == "deepseek-chat":
            return False
        return (body.get("thinking") or {}).get("type", "enabled") != "disabled"

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return f"call_{index}_{uuid.uuid4()}"

    def chunk_head(self, reply: Reply) -> JSON:
        return {**super().chunk_head(reply), "system_fingerprint": "fp_8802369eaa_prod0425fp8"}

    def opening(self, reply: Reply) -> Iterator[Write]:
        yield b": keep-alive\n\n"
        yield self.chunk(reply, {"role": "assistant", "content": None, "reasoning_content": ""} if reply.turn.reasoning
                         else {"role": "assistant", "content": ""})

    def reasoning_delta(self, reply: Reply, piece: str) -> JSON:
        return {"content": None, "reasoning_content": piece}

    def content_delta(self, reply: Reply, piece: str) -> JSON:
        return {"content": piece, "reasoning_content": None} if reply.turn.reasoning else {"content": piece}

    def closing(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"content": ""}, self.finish_reason(reply), usage=self.usage(reply))
        yield DONE

    def usage(self, reply: Reply) -> JSON:
        usage = super().usage(reply)
        usage.update(prompt_tokens_details={"cached_tokens": 0}, prompt_cache_hit_tokens=0,
                     prompt_cache_miss_tokens=reply.prompt_tokens)
        return usage

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        if self.thinks(str(body.get("model", "")), body):
            for index, message in assistant_tool_turns(body):
                if not message.get("reasoning_content"):
                    return self._invalid(MISSING_REASONING.format(index=index))
        index = unpaired_tool_message(body)
        if index is not None:
            return self._invalid(f"Messages with role 'tool' must be a response to a preceding message with 'tool_calls' "
                                 f"(message index {index}).")
        return None

    def _invalid(self, message: str) -> HttpError:
        return HttpError.of(400, self.error_object(400, "invalid_request_error", "invalid_request_error", message))
