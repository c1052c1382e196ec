"""llama.cpp's ``llama-server --jinja``, with its ``--reasoning-format`` options.

Sources (ggml-org/llama.cpp):
- common/chat.cpp ``common_chat_msg_diff_to_json_oaicompat``: a delta carries ``reasoning_content``
  and/or ``content`` and/or one ``tool_calls`` entry ``{index, id+type (first diff only),
  function: {name (first diff only), arguments}}`` — ``arguments`` is always present.
- tools/server/server-task.cpp ``to_json_oaicompat_chat_stream``: the diffs, then a finish chunk
  ``delta: {}`` (``tool_calls`` when the message has calls, ``length`` when cut), then, with
  ``stream_options.include_usage``, a ``choices: []`` chunk with usage; ``timings`` ride on the last
  chunk; every chunk has ``system_fingerprint`` (the build) and no ``logprobs`` key.
- tools/server/server-common.cpp: ``gen_tool_call_id`` is 32 random [0-9A-Za-z];
  ``gen_chatcmplid`` is ``chatcmpl-`` + 32 of them; ``format_error_response`` gives ``{code,
  message, type}`` (``invalid_request_error`` 400, ``not_found_error`` 404, ``server_error`` 500,
  ``unavailable_error`` 503), sent as ``{"error": {...}}``.
- tools/server/server-context.cpp (stream loop): a failure mid-stream is written as
  ``data: {"error": {...}}`` and the stream is terminated, without ``[DONE]``.
- common/arg.cpp ``--reasoning-format`` help (and PR #16394): ``none`` leaves thoughts unparsed in
  ``content``; ``deepseek`` puts them in ``reasoning_content``; ``deepseek-legacy`` keeps ``<think>``
  tags in ``content`` while also populating ``reasoning_content``; default ``auto``.

Best readings: the request's own ``reasoning_format`` overrides the server flag; the first chunk is
``{"role": "assistant", "content": null}``; the single-model server answers any model name; a busy
server (no free slot, ``--slots`` full) answers 503 ``unavailable_error`` for ``rate_limit``.
"""

from __future__ import annotations

from typing import Iterator

from ..dialect import ALNUM, JSON, Dialect, HttpError, Ledger, Reply, Write, random_text, sse
from ..scenario import Call, Failure


class LlamaCpp(Dialect):
    name = "llamacpp"
    title = "llama.cpp --jinja (reasoning_format auto/deepseek)"
    default_models = ("Qwen3-8B-Q4_K_M.gguf",)
    thinking_models = ("Qwen3", "DeepSeek-R1", "QwQ", "gpt-oss")
    ignores_model = True
    reasoning_format = "deepseek"
    retry_after = None

    def format_for(self, reply: Reply) -> str:
        requested = reply.body.get("reasoning_format")
        return requested if requested in ("none", "deepseek", "deepseek-legacy") else self.reasoning_format

    def completion_id(self) -> str:
        return "chatcmpl-" + random_text(ALNUM, 32)

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return random_text(ALNUM, 32)

    def chunk_head(self, reply: Reply) -> JSON:
        return {"created": reply.created, "id": reply.completion_id, "model": reply.model,
                "system_fingerprint": "b6600-deadbeef", "object": "chat.completion.chunk"}

    def chunk(self, reply: Reply, delta: JSON, finish: str | None = None, **top: object) -> bytes:
        return sse({"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], **self.chunk_head(reply), **top})

    def opening(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant", "content": None})

    def stream(self, reply: Reply) -> Iterator[Write]:
        yield from self.opening(reply)
        form = self.format_for(reply)
        if reply.turn.reasoning:
            yield from self._reasoning(reply, form)
        for piece in reply.turn.content:
            yield self.chunk(reply, {"content": piece})
        yield from self.tool_call_chunks(reply)
        yield from self.closing(reply)

    def _reasoning(self, reply: Reply, form: str) -> Iterator[Write]:
        if form == "none":  # the template opened <think> in the prompt: thoughts, a lone </think>
            for piece in reply.turn.reasoning:
                yield self.chunk(reply, {"content": piece})
            yield self.chunk(reply, {"content": "</think>\n\n"})
        elif form == "deepseek-legacy":  # the same thoughts twice: as reasoning, and tagged in content
            yield self.chunk(reply, {"content": "<think>"})
            for piece in reply.turn.reasoning:
                yield self.chunk(reply, {"reasoning_content": piece, "content": piece})
            yield self.chunk(reply, {"content": "</think>"})
        else:
            for piece in reply.turn.reasoning:
                yield self.chunk(reply, {"reasoning_content": piece})

    def call_deltas(self, reply: Reply, index: int, call_id: str, call: Call) -> Iterator[JSON]:
        fragments = call.fragments()
        yield {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": fragments[0]}}
        for fragment in fragments[1:]:
            yield {"index": index, "function": {"arguments": fragment}}

    def closing(self, reply: Reply) -> Iterator[Write]:
        timings = {"prompt_n": reply.prompt_tokens, "predicted_n": reply.completion_tokens, "predicted_per_second": 42.0}
        finish = self.chunk(reply, {}, self.finish_reason(reply), **({} if reply.include_usage else {"timings": timings}))
        yield finish
        if reply.include_usage:
            yield sse({"choices": [], **self.chunk_head(reply), "usage": self.usage(reply), "timings": timings})
        yield b"data: [DONE]\n\n"

    def usage(self, reply: Reply) -> JSON:
        prompt, completion = reply.prompt_tokens, reply.completion_tokens
        return {"completion_tokens": completion, "prompt_tokens": prompt, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": 0}}

    def message(self, reply: Reply) -> JSON:
        message = super().message(reply)
        form, thoughts = self.format_for(reply), reply.turn.reasoning_text
        if thoughts and form == "none":
            message.pop("reasoning_content", None)
            message["content"] = thoughts + "</think>\n\n" + reply.turn.content_text
        elif thoughts and form == "deepseek-legacy":
            message["content"] = f"<think>{thoughts}</think>" + reply.turn.content_text
        return message

    def error(self, failure: Failure, model: str) -> HttpError:
        status, kind, message = {
            "rate_limit": (503, "unavailable_error", "Loading model"),
            "bad_request": (400, "exceed_context_size_error", "the request exceeds the available context size, try increasing it"),
            "model_not_found": (404, "not_found_error", f"model '{model}' not found"),
            "server_error": (500, "server_error", "Failed to decode the batch"),
        }[failure.kind]
        return HttpError.of(status, {"error": {"code": status, "message": message, "type": kind}})

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        yield sse({"error": {"code": 500, "message": "Failed to decode the batch", "type": "server_error"}})


class LlamaCppNone(LlamaCpp):
    name = "llamacpp-none"
    title = "llama.cpp --reasoning-format none (lone `</think>` in content)"
    reasoning_format = "none"


class LlamaCppLegacy(LlamaCpp):
    name = "llamacpp-legacy"
    title = "llama.cpp --reasoning-format deepseek-legacy (both)"
    reasoning_format = "deepseek-legacy"
