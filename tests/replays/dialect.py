"""The chat-completion wire every replayed server shares, with a hook at each place servers differ.

:class:`Dialect` writes the plain OpenAI shape (a role chunk, one delta per token, a finish chunk,
a trailing ``choices: []`` usage chunk when ``stream_options.include_usage`` asks, ``[DONE]``).
Each server's module (``tests/replays/dialects/``) subclasses it and overrides only what its
server does differently, with a comment tracing each override to the server's source or docs.

A stream is an iterator of writes: ``bytes`` (one SSE event, or a comment line) or :data:`ABORT`
(the server drops the connection there: no terminating chunk, no ``[DONE]``).
"""

from __future__ import annotations

import json
import secrets
import string
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

from .scenario import Call, Failure, Turn

JSON = dict[str, Any]
ALNUM = string.ascii_letters + string.digits


class Abort:
    """Where a stream stops without ending: the connection is dropped."""


ABORT = Abort()
DONE = b"data: [DONE]\n\n"
Write = bytes | Abort


def sse(payload: Any) -> bytes:
    """One SSE event; JSON as servers write it (raw UTF-8, no spaces)."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def random_text(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


@dataclass
class HttpError:
    """An answer that is not a success: its status, headers and body exactly as the server sends them."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> "HttpError":
        return cls(status, json.dumps(payload, ensure_ascii=False).encode(), headers=headers or {})

    def json(self) -> Any:
        return json.loads(self.body) if self.content_type == "application/json" else self.body.decode()


@dataclass
class IssuedCall:
    """A tool call a replayed server handed out, with what it expects back on the follow-up."""

    id: str
    name: str
    arguments: str
    signature: str | None = None  # Gemini's thought_signature, OpenRouter's reasoning signature


@dataclass
class Ledger:
    """What one replayed server issued: the state its follow-up checks compare against."""

    calls: list[IssuedCall] = field(default_factory=list)

    def ids(self) -> set[str]:
        return {call.id for call in self.calls}

    def signatures(self) -> set[str]:
        return {call.signature for call in self.calls if call.signature}

    def history_count(self, body: JSON) -> int:
        """Tool calls already in the request's history (Kimi numbers its ids across the conversation)."""
        return sum(len(m.get("tool_calls") or []) for m in body.get("messages") or [] if m.get("role") == "assistant")


@dataclass
class Reply:
    """One answer being played: the request, the turn, and the ids and numbers chosen for it."""

    body: JSON
    model: str
    turn: Turn
    call_ids: list[str]
    completion_id: str
    created: int = field(default_factory=lambda: int(time.time()))
    signature: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool((self.body.get("stream_options") or {}).get("include_usage"))

    @property
    def prompt_tokens(self) -> int:
        return max(1, len(json.dumps(self.body.get("messages", []))) // 4)

    @property
    def reasoning_tokens(self) -> int:
        return len(self.turn.reasoning)

    @property
    def completion_tokens(self) -> int:
        return len(self.turn.reasoning) + len(self.turn.content) + sum(len(c.fragments()) for c in self.turn.calls)

    def calls(self) -> list[tuple[int, str, Call]]:
        return [(index, self.call_ids[index], call) for index, call in enumerate(self.turn.calls)]


class Dialect:
    """The OpenAI chat-completion wire; subclasses override where their server differs."""

    name = "openai"
    title = "OpenAI-compatible"
    default_models: tuple[str, ...] = ()
    thinking_models: tuple[str, ...] = ()  # substrings of model names that reason
    ignores_model = False  # the server answers whatever model name it is given
    tool_finish = "tool_calls"

    # -- who thinks, and the ids this server makes ---------------------------------------------
    def thinks(self, model: str, body: JSON) -> bool:
        return any(marker in model for marker in self.thinking_models)

    def serves(self, model: str, served: set[str]) -> bool:
        return self.ignores_model or model in served

    def completion_id(self) -> str:
        return "chatcmpl-" + uuid.uuid4().hex

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "call_" + secrets.token_hex(12)

    def new_reply(self, body: JSON, model: str, turn: Turn, ledger: Ledger) -> Reply:
        ids = [self.call_id(ledger, body, index, call) for index, call in enumerate(turn.calls)]
        reply = Reply(body, model, turn, ids, self.completion_id(), signature=self.signature_for(turn))
        self.issue(reply, ledger)
        return reply

    def signature_for(self, turn: Turn) -> str | None:
        """The opaque signature this server hands out with the turn (and wants back), if any."""
        return None

    def issue(self, reply: Reply, ledger: Ledger) -> None:
        for _, call_id, call in reply.calls():
            ledger.calls.append(IssuedCall(call_id, call.name, call.arguments, reply.signature))

    # -- the stream ------------------------------------------------------------------------------
    def stream(self, reply: Reply) -> Iterator[Write]:
        yield from self.opening(reply)
        for piece in reply.turn.reasoning:
            yield self.chunk(reply, self.reasoning_delta(reply, piece))
        for piece in reply.turn.content:
            yield self.chunk(reply, self.content_delta(reply, piece))
        yield from self.tool_call_chunks(reply)
        yield from self.closing(reply)

    def opening(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant", "content": ""})

    def chunk(self, reply: Reply, delta: JSON, finish: str | None = None, **top: Any) -> bytes:
        return sse({**self.chunk_head(reply), "choices": [self.choice(delta, finish)], **top})

    def chunk_head(self, reply: Reply) -> JSON:
        return {"id": reply.completion_id, "object": "chat.completion.chunk", "created": reply.created, "model": reply.model}

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def reasoning_delta(self, reply: Reply, piece: str) -> JSON:
        return {"reasoning_content": piece}

    def content_delta(self, reply: Reply, piece: str) -> JSON:
        return {"content": piece}

    def tool_call_chunks(self, reply: Reply) -> Iterator[Write]:
        for index, call_id, call in reply.calls():
            for delta in self.call_deltas(reply, index, call_id, call):
                yield self.chunk(reply, {"tool_calls": [delta]})

    def call_deltas(self, reply: Reply, index: int, call_id: str, call: Call) -> Iterator[JSON]:
        """The first delta names the call; the rest carry argument fragments (OpenAI's own form)."""
        yield {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        for fragment in call.fragments():
            yield {"index": index, "function": {"arguments": fragment}}

    def closing(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {}, self.finish_reason(reply))
        if reply.include_usage:
            yield sse({**self.chunk_head(reply), "choices": [], "usage": self.usage(reply)})
        yield DONE

    def finish_reason(self, reply: Reply) -> str:
        return reply.turn.finish or (self.tool_finish if reply.turn.calls else "stop")

    def usage(self, reply: Reply) -> JSON:
        prompt, completion = reply.prompt_tokens, reply.completion_tokens
        usage: JSON = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if reply.turn.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
        return usage

    # -- the non-streamed answer -----------------------------------------------------------------
    def completion(self, reply: Reply) -> JSON:
        choice = {"index": 0, "message": self.message(reply), "logprobs": None, "finish_reason": self.finish_reason(reply)}
        head = {**self.chunk_head(reply), "object": "chat.completion"}
        return {**head, "choices": [choice], "usage": self.usage(reply)}

    def message(self, reply: Reply) -> JSON:
        message: JSON = {"role": "assistant", "content": reply.turn.content_text or None}
        if reply.turn.reasoning:
            message.update(self.reasoning_fields(reply, reply.turn.reasoning_text))
        if reply.turn.calls:
            message["tool_calls"] = [self.whole_call(reply, index, call_id, call) for index, call_id, call in reply.calls()]
        return message

    def reasoning_fields(self, reply: Reply, text: str) -> JSON:
        return {"reasoning_content": text}

    def whole_call(self, reply: Reply, index: int, call_id: str, call: Call) -> JSON:
        return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}

    # -- errors ----------------------------------------------------------------------------------
    errors: dict[str, tuple[int, str, Any, str]] = {
        # kind: (status, type, code, message) in OpenAI's {"error": {...}} object
        "rate_limit": (429, "rate_limit_exceeded", "rate_limit_exceeded", "Rate limit reached. Please try again in 2s."),
        "bad_request": (400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 8192 tokens."),
        "server_error": (500, "server_error", None, "The server had an error while processing your request."),
        "model_not_found": (404, "invalid_request_error", "model_not_found", "The model `{model}` does not exist."),
    }
    retry_after: str | None = "2"  # seconds, on a 429, where the server sends Retry-After

    def error(self, failure: Failure, model: str) -> HttpError:
        status, kind, code, message = self.errors[failure.kind]
        headers = {"Retry-After": self.retry_after} if status == 429 and self.retry_after else {}
        return HttpError.of(status, self.error_object(status, kind, code, message.format(model=model)), headers)

    def error_object(self, status: int, kind: str, code: Any, message: str) -> JSON:
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        """What the server writes when generation fails after the stream began (default: it drops)."""
        yield ABORT

    def refusal(self, body: JSON, ledger: Ledger) -> HttpError | None:
        """The server's own refusal of a request (a follow-up lacking what it must carry back)."""
        return None

    def models(self, served: list[str]) -> JSON:
        return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": self.name} for model in served]}


def assistant_tool_turns(body: JSON) -> Iterator[tuple[int, JSON]]:
    """(index, message) of each assistant message with tool calls, in the request's order."""
    for index, message in enumerate(body.get("messages") or []):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            yield index, message


def unpaired_tool_message(body: JSON) -> int | None:
    """Index of the first tool message that answers no call of the assistant message before it.

    OpenAI's own check (stateless, within one request): a ``tool`` message must answer a call of
    the nearest preceding assistant message with ``tool_calls``."""
    open_ids: set[str] = set()
    for index, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        if role == "assistant":
            open_ids = {call.get("id") for call in message.get("tool_calls") or []}
        elif role == "tool" and message.get("tool_call_id") not in open_ids:
            return index
    return None
