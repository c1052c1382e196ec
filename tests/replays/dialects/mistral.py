"""The Mistral API (``https://api.mistral.ai/v1``) — and any server that renders Mistral's templates
through ``mistral_common`` (vLLM's and SGLang's Mistral tokenizer mode validate the same way).

Sources:
- mistralai/mistral-common src/mistral_common/protocol/instruct/validator.py (1.1.0 → 1.2.0 diff):
  an assistant tool call id (other than ``"null"``) and a tool message's ``tool_call_id`` must
  match ``^[a-zA-Z0-9]{9}$``, else "Tool call id was X but must be a-z, A-Z, 0-9, with a length
  of 9." (``InvalidFunctionCallException`` / ``InvalidToolMessageException``).
- The API's answer to that, captured in mistralai/mistral-vibe#1075, editor-code-assistant/eca#233,
  nearai/ironclaw#1241: HTTP 400 ``{"object": "error", "message": "Tool call id was … length of
  9.", "type": "invalid_function_call", "param": null, "code": "3280"}`` — a flat object.
- https://docs.mistral.ai/capabilities/reasoning (and braintrust-sdk-javascript#1857,
  spring-ai#5020): Magistral models answer with ``content`` as a list of chunks,
  ``{"type": "thinking", "thinking": [{"type": "text", "text": …}]}`` then ``{"type": "text", …}``.

Best readings: tool calls come whole in one chunk with ``index``; usage rides on the finish chunk
whether or not asked; the streamed answer after a Magistral thinking block is plain string
content; an unknown model is 400 ``invalid_model``; 429 "Requests rate limit exceeded"; a failure
mid-stream ends the body.
"""

from __future__ import annotations

import re
from typing import Iterator

from ..dialect import ALNUM, DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, random_text
from ..scenario import Call, Failure

MISTRAL_ID = re.compile(r"^[a-zA-Z0-9]{9}$")


class Mistral(Dialect):
    name = "mistral"
    title = "Mistral API"
    default_models = ("mistral-large-latest", "mistral-small-latest", "magistral-medium-latest", "devstral-medium-latest")
    thinking_models = ("magistral",)
    retry_after = None

    def completion_id(self) -> str:
        return random_text("0123456789abcdef", 32)

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return random_text(ALNUM, 9)

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "finish_reason": finish}

    def reasoning_delta(self, reply: Reply, piece: str) -> JSON:
        return {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": piece}]}]}

    def tool_call_chunks(self, reply: Reply) -> Iterator[Write]:
        if reply.turn.calls:
            calls = [{**self.whole_call(reply, index, call_id, call), "index": index} for index, call_id, call in reply.calls()]
            yield self.chunk(reply, {"content": "", "tool_calls": calls})

    def closing(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"content": ""}, self.finish_reason(reply), usage=self.usage(reply))
        yield DONE

    def usage(self, reply: Reply) -> JSON:
        prompt, completion = reply.prompt_tokens, reply.completion_tokens
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}

    def message(self, reply: Reply) -> JSON:
        message = super().message(reply)
        message.pop("reasoning_content", None)
        if reply.turn.reasoning:
            thinking = {"type": "thinking", "thinking": [{"type": "text", "text": reply.turn.reasoning_text}]}
            message["content"] = [thinking, {"type": "text", "text": reply.turn.content_text}]
        return message

    def error(self, failure: Failure, model: str) -> HttpError:
        status, kind, code, message = {
            "rate_limit": (429, "rate_limited", "1300", "Requests rate limit exceeded"),
            "bad_request": (400, "invalid_request_prompt", "3051", "Prompt contains 140000 tokens, too large for model with 131072 maximum context length"),
            "model_not_found": (400, "invalid_model", "1500", f"Invalid model: {model}"),
            "server_error": (500, "internal_server_error", "1000", "Internal server error"),
        }[failure.kind]
        return HttpError.of(status, {"object": "error", "message": message, "type": kind, "param": None, "code": code})

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        for message in body.get("messages") or []:
            ids = [call.get("id") for call in message.get("tool_calls") or []] if message.get("role") == "assistant" else []
            if message.get("role") == "tool":
                ids = [message.get("tool_call_id")]
            for call_id in ids:
                if call_id != "null" and not MISTRAL_ID.match(str(call_id)):
                    return bad_tool_call_id(str(call_id))
        return None


def bad_tool_call_id(call_id: str) -> HttpError:
    message = f"Tool call id was {call_id} but must be a-z, A-Z, 0-9, with a length of 9."
    return HttpError.of(400, {"object": "error", "message": message, "type": "invalid_function_call", "param": None, "code": "3280"})

