"""OpenRouter (``https://openrouter.ai/api/v1``).

Sources:
- https://openrouter.ai/docs/api/reference/streaming: comments ``: OPENROUTER PROCESSING`` keep
  the stream alive; errors that occur mid-generation arrive as a regular ``data:`` event with an
  ``error`` field — a chunk that still has ``choices``, with ``finish_reason: "error"``; the final
  chunk includes usage stats.
- https://openrouter.ai/docs/api/reference/errors-and-debugging: errors are ``{"error": {code,
  message, metadata?}}`` with the HTTP status equal to ``code`` when the request fails before the
  model starts (400, 401, 402, 403, 408, 429, 502, 503); 429 and 503 may carry ``Retry-After``.
- OpenRouter SDK ``ChatStreamOptions``: ``include_usage`` is deprecated, "Full usage details are
  always included".
- https://openrouter.ai/docs/use-cases/reasoning-tokens: reasoning in ``reasoning`` (a string) and
  ``reasoning_details`` (typed, signed blocks: ``reasoning.text`` with ``signature``,
  ``reasoning.encrypted``, ``reasoning.summary``), to be passed back unchanged on the assistant
  message to preserve reasoning across tool calls.

Best readings: the usage chunk has ``choices: []``; the mid-stream error's ``code`` is a string like
``server_error``; chunks carry ``provider`` and ``native_finish_reason``; tool calls stream OpenAI's
way with the provider's ids (``toolu_…`` for Anthropic models); OpenRouter itself does not refuse a
follow-up without ``reasoning_details`` (it degrades), so the replay records, not refuses.
"""

from __future__ import annotations

import base64
import secrets
from typing import Iterator

from ..dialect import ALNUM, DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, random_text, sse
from ..scenario import Call, Failure, Turn


class OpenRouter(Dialect):
    name = "openrouter"
    title = "OpenRouter"
    default_models = ("anthropic/claude-sonnet-4.5", "deepseek/deepseek-r1", "openai/gpt-4o-mini", "google/gemini-2.5-flash")
    thinking_models = ("claude", "deepseek-r1", "gemini-2.5")

    def completion_id(self) -> str:
        return "gen-" + random_text(ALNUM, 24)

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        if str(body.get("model", "")).startswith("anthropic/"):
            return "toolu_vrtx_01" + random_text(ALNUM, 22)
        return "call_" + random_text(ALNUM, 24)

    def signature_for(self, turn: Turn) -> str | None:  # the provider's signature over the reasoning block
        return base64.b64encode(secrets.token_bytes(48)).decode() if turn.reasoning else None

    def chunk_head(self, reply: Reply) -> JSON:
        return {**super().chunk_head(reply), "provider": "Anthropic" if reply.model.startswith("anthropic/") else "DeepInfra"}

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "finish_reason": finish, "native_finish_reason": finish, "logprobs": None}

    def opening(self, reply: Reply) -> Iterator[Write]:
        yield b": OPENROUTER PROCESSING\n\n"
        yield self.chunk(reply, {"role": "assistant", "content": ""})

    def reasoning_delta(self, reply: Reply, piece: str) -> JSON:
        detail = {"type": "reasoning.text", "text": piece, "format": "anthropic-claude-v1", "index": 0}
        return {"role": "assistant", "content": "", "reasoning": piece, "reasoning_details": [detail]}

    def stream(self, reply: Reply) -> Iterator[Write]:
        yield from self.opening(reply)
        for piece in reply.turn.reasoning:
            yield self.chunk(reply, self.reasoning_delta(reply, piece))
        if reply.signature:  # the signature closes the reasoning block
            detail = {"type": "reasoning.text", "text": "", "signature": reply.signature, "format": "anthropic-claude-v1", "index": 0}
            yield self.chunk(reply, {"role": "assistant", "content": "", "reasoning": "", "reasoning_details": [detail]})
        for piece in reply.turn.content:
            yield self.chunk(reply, {"role": "assistant", "content": piece})
        yield from self.tool_call_chunks(reply)
        yield from self.closing(reply)

    def closing(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant", "content": ""}, self.finish_reason(reply))
        yield sse({**self.chunk_head(reply), "choices": [], "usage": self.usage(reply)})
        yield DONE

    def usage(self, reply: Reply) -> JSON:
        usage = super().usage(reply)
        usage.update(cost=0.00042, prompt_tokens_details={"cached_tokens": 0})
        usage.setdefault("completion_tokens_details", {"reasoning_tokens": 0})
        return usage

    def reasoning_fields(self, reply: Reply, text: str) -> JSON:
        detail = {"type": "reasoning.text", "text": text, "signature": reply.signature, "format": "anthropic-claude-v1", "index": 0}
        return {"reasoning": text, "reasoning_details": [detail]}

    def error(self, failure: Failure, model: str) -> HttpError:
        status, message = {
            "rate_limit": (429, f"{model} is temporarily rate-limited upstream. Please retry shortly."),
            "bad_request": (400, "This endpoint's maximum context length is 8192 tokens. However, you requested about 9000 tokens."),
            "model_not_found": (400, f"{model} is not a valid model ID"),
            "server_error": (502, "Provider returned error"),
        }[failure.kind]
        headers = {"Retry-After": "2"} if status == 429 else None
        return HttpError.of(status, {"error": {"code": status, "message": message, "metadata": {"provider_name": "DeepInfra"}}}, headers)

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        error = {"code": "server_error", "message": "Provider disconnected unexpectedly"}
        yield self.chunk(reply, {"content": ""}, "error", error=error)
        yield DONE
