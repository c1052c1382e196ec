"""Groq (``https://api.groq.com/openai/v1``).

Sources:
- groq/groq-python src/groq/types/chat/chat_completion_chunk.py: ``x_groq`` — ``id`` "sent only in
  the first and final chunk", ``usage`` "Usage information for the stream. Only sent in the final
  chunk", ``error`` "An error string indicating why a stream was stopped early"; top-level
  ``usage`` only with ``stream_options.include_usage`` (on a last chunk whose ``choices`` may be
  empty); ``delta.reasoning`` "Only available for reasoning models when requests parameter
  reasoning_format has value `parsed`".
- https://console.groq.com/docs/reasoning: ``reasoning_format`` ``parsed`` (a ``reasoning`` field),
  ``raw`` (``<think>`` tags in content), ``hidden``.

Best readings: a tool call comes whole in one chunk (Groq does not stream arguments); ids ``call_``
+ alphanumerics; an unknown model is 404 ``model_not_found``; a 429 carries ``retry-after``; a
failure mid-stream is a last chunk with ``x_groq.error`` and the body ends without ``[DONE]``; a tool
message must answer a call of the assistant message before it (OpenAI's check), else 400.
"""

from __future__ import annotations

import string
from typing import Iterator

from ..dialect import DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, random_text, sse, unpaired_tool_message
from ..scenario import Call


class Groq(Dialect):
    name = "groq"
    title = "Groq"
    default_models = ("llama-3.3-70b-versatile", "openai/gpt-oss-120b", "qwen/qwen3-32b")
    thinking_models = ("gpt-oss", "qwen3")
    errors = {
        "rate_limit": (429, "tokens", "rate_limit_exceeded",
                       "Rate limit reached for model `{model}` in organization `org_01` on tokens per minute (TPM): "
                       "Limit 6000, Used 5800, Requested 900. Please try again in 7.66s."),
        "bad_request": (400, "invalid_request_error", "context_length_exceeded",
                        "Please reduce the length of the messages or completion."),
        "server_error": (500, "internal_server_error", "internal_server_error", "Internal Server Error"),
        "model_not_found": (404, "invalid_request_error", "model_not_found",
                            "The model `{model}` does not exist or you do not have access to it."),
    }
    retry_after = "8"

    def format_for(self, reply: Reply) -> str:
        return reply.body.get("reasoning_format") or "parsed"

    def completion_id(self) -> str:
        return "chatcmpl-" + random_text(string.ascii_lowercase + string.digits, 26)

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "call_" + random_text(string.ascii_lowercase + string.digits, 24)

    def opening(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant", "content": ""}, x_groq={"id": "req_" + reply.completion_id[9:]})

    def stream(self, reply: Reply) -> Iterator[Write]:
        yield from self.opening(reply)
        form = self.format_for(reply)
        if reply.turn.reasoning and form == "raw":
            yield self.chunk(reply, {"content": "<think>"})
            for piece in reply.turn.reasoning:
                yield self.chunk(reply, {"content": piece})
            yield self.chunk(reply, {"content": "</think>"})
        elif reply.turn.reasoning and form == "parsed":
            for piece in reply.turn.reasoning:
                yield self.chunk(reply, {"reasoning": piece})
        for piece in reply.turn.content:
            yield self.chunk(reply, {"content": piece})
        yield from self.tool_call_chunks(reply)
        yield from self.closing(reply)

    def tool_call_chunks(self, reply: Reply) -> Iterator[Write]:
        for index, call_id, call in reply.calls():
            yield self.chunk(reply, {"tool_calls": [{**self.whole_call(reply, index, call_id, call), "index": index}]})

    def closing(self, reply: Reply) -> Iterator[Write]:
        x_groq = {"id": "req_" + reply.completion_id[9:], "usage": self.usage(reply)}
        yield self.chunk(reply, {}, self.finish_reason(reply), x_groq=x_groq)
        if reply.include_usage:
            yield sse({**self.chunk_head(reply), "choices": [], "usage": self.usage(reply)})
        yield DONE

    def usage(self, reply: Reply) -> JSON:
        usage = super().usage(reply)
        usage.update(queue_time=0.02, prompt_time=0.01, completion_time=0.05, total_time=0.06)
        return usage

    def reasoning_fields(self, reply: Reply, text: str) -> JSON:
        return {"reasoning": text} if self.format_for(reply) == "parsed" else {}

    def message(self, reply: Reply) -> JSON:
        message = super().message(reply)
        if reply.turn.reasoning and self.format_for(reply) == "raw":
            message["content"] = f"<think>{reply.turn.reasoning_text}</think>" + reply.turn.content_text
        return message

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {}, None, x_groq={"id": "req_" + reply.completion_id[9:], "error": "Internal Server Error"})

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        index = unpaired_tool_message(body)
        if index is None:
            return None
        message = f"'messages.{index}' : for 'role:tool' the following must be satisfied[('messages.{index}.tool_call_id' : " \
                  "must match a tool call id of the preceding assistant message)]"
        return HttpError.of(400, self.error_object(400, "invalid_request_error", None, message))
