"""vLLM's OpenAI-compatible server (``vllm serve``), in four variants a user meets.

Sources (vllm-project/vllm):
- vllm/entrypoints/openai/chat_completion/serving.py, ``chat_completion_stream_generator``: the
  first chunk per choice is ``delta: {"role": "assistant", "content": ""}``; chunks are dumped with
  ``exclude_unset=True`` (absent fields are left out); the finish chunk may carry the tool call's
  remaining arguments (``_create_remaining_args_delta``); with ``stream_options.include_usage`` a
  last chunk with ``choices: []`` carries usage; a failure mid-stream is ``data: {error}`` then
  ``data: [DONE]`` (``create_streaming_error_response``); ``finish_reason`` is ``tool_calls`` when
  auto tool choice called tools.
- vllm/entrypoints/openai/engine/protocol.py: ``ErrorResponse{error: ErrorInfo{message, type,
  param, code: int}}``; ``DeltaMessage`` has ``reasoning`` and the deprecated ``reasoning_content``
  that a validator copies from it (so the 0.11–0.17 releases send both, null included).
- vllm/entrypoints/chat_utils.py ``make_tool_call_id``: ``chatcmpl-tool-<uuid4 hex>``.
- engine/serving.py ``_check_model``: 404, type ``NotFoundError``, "The model `x` does not exist.".
- vllm/reasoning/deepseek_r1_reasoning_parser.py: without ``<think>`` in the output (the chat
  template opened it in the prompt), text before ``</think>`` is reasoning, the rest content.
- Docs: https://docs.vllm.ai/en/stable/features/reasoning_outputs/ ("reasoning used to be called
  reasoning_content"); https://docs.vllm.ai/en/v0.10.0/features/reasoning_outputs.html
  (``reasoning_content`` only); https://docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/
  ("reasoning_content will continue to work").

Best readings (not read in source): the hermes parser's first tool delta names the function with no
``arguments`` key; the last argument fragment lands in the finish chunk; a 429 comes from a gateway
in front of vLLM (vLLM has no rate limit of its own), in vLLM's error shape.
"""

from __future__ import annotations

import uuid
from typing import Iterator

from ..dialect import DONE, JSON, Dialect, Ledger, Reply, Write, sse
from ..scenario import Call


class VLLM(Dialect):
    name = "vllm"
    title = "vLLM (current: `reasoning`)"
    default_models = ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "meta-llama/Llama-3.1-8B-Instruct")
    thinking_models = ("Qwen3", "DeepSeek-R1", "QwQ")
    errors = {
        "rate_limit": (429, "RateLimitError", 429, "Too many requests."),
        "bad_request": (400, "BadRequestError", 400, "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens."),
        "server_error": (500, "InternalServerError", 500, "Engine loop has died"),
        "model_not_found": (404, "NotFoundError", 404, "The model `{model}` does not exist."),
    }

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "chatcmpl-tool-" + uuid.uuid4().hex

    def reasoning_delta(self, reply: Reply, piece: str) -> JSON:
        return {"reasoning": piece}

    def reasoning_fields(self, reply: Reply, text: str) -> JSON:
        return {"reasoning": text}

    def call_deltas(self, reply: Reply, index: int, call_id: str, call: Call) -> Iterator[JSON]:
        yield {"index": index, "id": call_id, "type": "function", "function": {"name": call.name}}
        fragments = call.fragments()
        if index == len(reply.turn.calls) - 1:
            fragments = fragments[:-1]  # the last call's last fragment rides on the finish chunk
        for fragment in fragments:
            yield {"index": index, "function": {"arguments": fragment}}

    def closing(self, reply: Reply) -> Iterator[Write]:
        delta: JSON = {}
        if reply.turn.calls:
            index, _, call = reply.calls()[-1]
            delta = {"tool_calls": [{"index": index, "function": {"arguments": call.fragments()[-1]}}]}
        yield self.chunk(reply, delta, self.finish_reason(reply))
        if reply.include_usage:
            yield sse({**self.chunk_head(reply), "choices": [], "usage": self.usage(reply)})
        yield DONE

    def delta(self, delta: JSON) -> JSON:
        """A delta as this version serializes it (the transitional versions add reasoning_content)."""
        return delta

    def chunk(self, reply: Reply, delta: JSON, finish: str | None = None, **top: object) -> bytes:
        return super().chunk(reply, self.delta(delta), finish, **top)

    def error_object(self, status: int, kind: str, code: object, message: str) -> JSON:
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        yield sse(self.error_object(500, "InternalServerError", 500, "Engine loop has died"))
        yield DONE


class VLLMTransitional(VLLM):
    """vLLM 0.11–0.17: ``reasoning`` and its deprecated copy ``reasoning_content`` on every delta."""

    name = "vllm-0.11"
    title = "vLLM 0.11–0.17 (`reasoning` + `reasoning_content`)"

    def delta(self, delta: JSON) -> JSON:
        # DeltaMessage.handle_deprecated_reasoning_content assigns reasoning_content on every
        # delta, which marks it set for exclude_unset: null on deltas that carry no reasoning.
        return {**delta, "reasoning_content": delta.get("reasoning")}

    def reasoning_fields(self, reply: Reply, text: str) -> JSON:
        return {"reasoning": text, "reasoning_content": text}


class VLLMLegacy(VLLM):
    """vLLM up to 0.10: ``reasoning_content`` only, and the flat error object of its FastChat roots."""

    name = "vllm-0.10"
    title = "vLLM ≤ 0.10 (`reasoning_content`)"

    def reasoning_delta(self, reply: Reply, piece: str) -> JSON:
        return {"reasoning_content": piece}

    def reasoning_fields(self, reply: Reply, text: str) -> JSON:
        return {"reasoning_content": text}

    def error_object(self, status: int, kind: str, code: object, message: str) -> JSON:
        return {"object": "error", "message": message, "type": kind, "param": None, "code": code}

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        yield sse({"error": self.error_object(500, "InternalServerError", 500, "Engine loop has died")})
        yield DONE


class VLLMNoParser(VLLM):
    """A thinking model served without ``--reasoning-parser``: the DeepSeek-R1, QwQ and
    Qwen3-Thinking templates end the prompt with ``<think>\\n``, so the raw output is the thinking,
    a lone ``</think>``, then the answer, all in ``content``."""

    name = "vllm-noparser"
    title = "vLLM without a reasoning parser (lone `</think>`)"

    def stream(self, reply: Reply) -> Iterator[Write]:
        yield from self.opening(reply)
        if reply.turn.reasoning:
            for piece in reply.turn.reasoning:
                yield self.chunk(reply, {"content": piece})
            yield self.chunk(reply, {"content": "</think>"})
            yield self.chunk(reply, {"content": "\n\n"})
        for piece in reply.turn.content:
            yield self.chunk(reply, {"content": piece})
        yield from self.tool_call_chunks(reply)
        yield from self.closing(reply)

    def message(self, reply: Reply) -> JSON:
        message = super().message(reply)
        message.pop("reasoning", None)
        if reply.turn.reasoning:
            message["content"] = reply.turn.reasoning_text + "</think>\n\n" + reply.turn.content_text
        return message
