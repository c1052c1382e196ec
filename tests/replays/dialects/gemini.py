"""Gemini's OpenAI-compatible endpoint (``https://generativelanguage.googleapis.com/v1beta/openai/``).

Sources:
- https://ai.google.dev/gemini-api/docs/thought-signatures (OpenAI compatibility section) and its
  use in continuedev/continue#8865: a tool call carries its signature in
  ``extra_content.google.thought_signature``; in parallel calls only the first call of a step has
  one; it must come back exactly as received; validation is strict on the current turn (the
  messages after the last user message); ``skip_thought_signature_validator`` is the documented
  stand-in for a history the model did not make.
- The refusal, captured at https://discuss.ai.google.dev/t/…/109823 (gemini-3-pro-preview):
  HTTP 400 with a JSON **array** body ``[{"error": {"code": 400, "message": "Function call is
  missing a thought_signature in functionCall parts. … function call `default_api:NAME` , position
  N. please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
  "status": "INVALID_ARGUMENT"}}]``; every error of this endpoint is such an array.

Best readings: ids ``function-call-<digits>``; a tool call comes whole in one chunk, with
``index``; ``finish_reason`` is ``stop`` even after tool calls; usage rides on the finish chunk;
thought summaries (asked with ``google.thinking_config.include_thoughts``) arrive in ``content``
wrapped in ``<thought>…</thought>``; a signature the server did not issue is refused as "Corrupted
thought signature."; a failure mid-stream ends the body.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any, Iterator

from ..dialect import DONE, JSON, Dialect, HttpError, Ledger, Reply, Write, assistant_tool_turns
from ..scenario import Call, Failure, Turn

SKIP_VALIDATOR = "skip_thought_signature_validator"


class Gemini(Dialect):
    name = "gemini"
    title = "Gemini (OpenAI-compatible endpoint)"
    default_models = ("gemini-3-pro-preview", "gemini-3-flash-preview", "gemini-2.5-flash")
    thinking_models = ("gemini-3", "gemini-2.5")
    tool_finish = "stop"

    def thinks(self, model: str, body: JSON) -> bool:
        google = (body.get("extra_body") or {}).get("google") or body.get("google") or {}
        return super().thinks(model, body) and bool((google.get("thinking_config") or {}).get("include_thoughts"))

    def signature_for(self, turn: Turn) -> str | None:
        return base64.b64encode(secrets.token_bytes(32)).decode() if turn.calls else None

    def issue(self, reply: Reply, ledger: Ledger) -> None:
        super().issue(reply, ledger)
        for issued in ledger.calls[len(ledger.calls) - len(reply.call_ids) + 1 :]:  # only the first call is signed
            issued.signature = None

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "function-call-" + str(secrets.randbelow(10**19))

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"delta": delta, "finish_reason": finish, "index": 0}

    def opening(self, reply: Reply) -> Iterator[Write]:
        if reply.turn.reasoning:
            yield self.chunk(reply, {"content": "<thought>", "role": "assistant"})
        else:
            yield self.chunk(reply, {"content": reply.turn.content[0] if reply.turn.content else "", "role": "assistant"})

    def stream(self, reply: Reply) -> Iterator[Write]:
        yield from self.opening(reply)
        content = list(reply.turn.content)
        if reply.turn.reasoning:
            for piece in reply.turn.reasoning:
                yield self.chunk(reply, {"content": piece, "role": "assistant"})
            yield self.chunk(reply, {"content": "</thought>", "role": "assistant"})
        else:
            content = content[1:]
        for piece in content:
            yield self.chunk(reply, {"content": piece, "role": "assistant"})
        yield from self.tool_call_chunks(reply)
        yield from self.closing(reply)

    def whole_call(self, reply: Reply, index: int, call_id: str, call: Call) -> JSON:
        whole: dict[str, Any] = {"function": {"arguments": call.arguments, "name": call.name}, "id": call_id, "type": "function"}
        if index == 0 and reply.signature:
            whole["extra_content"] = {"google": {"thought_signature": reply.signature}}
        return whole

    def tool_call_chunks(self, reply: Reply) -> Iterator[Write]:
        for index, call_id, call in reply.calls():
            yield self.chunk(reply, {"role": "assistant", "tool_calls": [{**self.whole_call(reply, index, call_id, call), "index": index}]})

    def closing(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant"}, self.finish_reason(reply), usage=self.usage(reply))
        yield DONE

    def message(self, reply: Reply) -> JSON:
        message = super().message(reply)
        message.pop("reasoning_content", None)
        if reply.turn.reasoning:
            message["content"] = f"<thought>{reply.turn.reasoning_text}</thought>" + reply.turn.content_text
        return message

    def error(self, failure: Failure, model: str) -> HttpError:
        status, state, message = {
            "rate_limit": (429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
            "bad_request": (400, "INVALID_ARGUMENT", "The input token count (1100000) exceeds the maximum number of tokens allowed (1048576)."),
            "model_not_found": (404, "NOT_FOUND", f"models/{model} is not found for API version v1main, or is not supported for "
                                "generateContent. Call ListModels to see the list of available models and their supported methods."),
            "server_error": (500, "INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"),
        }[failure.kind]
        return array_error(status, state, message)

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        messages = body.get("messages") or []
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        issued = ledger.signatures()
        for index, message in assistant_tool_turns(body):
            if index < last_user:
                continue  # only the current turn is validated
            first = message["tool_calls"][0]
            signature = ((first.get("extra_content") or {}).get("google") or {}).get("thought_signature")
            if not signature:
                name = (first.get("function") or {}).get("name", "")
                return array_error(400, "INVALID_ARGUMENT", (
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work "
                    "correctly, and missing thought_signature may lead to degraded model performance. Additional data, "
                    f"function call `default_api:{name}` , position {index + 1}. please refer to "
                    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."))
            if signature != SKIP_VALIDATOR and signature not in issued:
                return array_error(400, "INVALID_ARGUMENT", "Corrupted thought signature.")
        return None

    def models(self, served: list[str]) -> JSON:
        return {"object": "list", "data": [{"id": f"models/{m}", "object": "model", "owned_by": "google"} for m in served]}


def array_error(status: int, state: str, message: str) -> HttpError:
    return HttpError.of(status, [{"error": {"code": status, "message": message, "status": state}}])
