"""``chat.completion.chunk`` events as bytes, framed exactly as Dify's parser needs them.

One event is ``data: <one-line JSON>\\n\\n``; keep-alives are their own ``: ping\\n\\n`` block;
nothing else. Dify's parser splits the body on the literal blank line ``\\n\\n`` and drops blocks
that start with ``:``: ``\\r\\n`` separators, a single ``\\n`` between events, ``event:``/``id:``
lines or multi-line ``data:`` make it drop the answer (tool calls included) without an error.
The fixed part of every chunk (id, created, model) is rendered once per response, so a delta
costs one JSON encoding of its text (:mod:`duet._wire_json`). The shapes are :mod:`duet.api.chat._protocol`'s
``ChatCompletionChunk``; a unit test holds each method's output equal to that model's JSON.
"""

from __future__ import annotations


from duet._wire_json import dumps as _json
from duet.agents import ToolCall

from duet.api._errors import APIError
from duet.api._rendering import Batched
from duet.api._wire import WireFinishReason

DONE = b"data: [DONE]\n\n"




def _usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0, cached_tokens: int = 0) -> bytes:
    usage: dict[str, object] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return _json(usage)


class ChunkEncoder:
    """Renders the chunks of one streamed response (same ``id``, ``created`` and ``model`` on each)."""

    __slots__ = ("_head", "_prefix")

    _OPEN = b'"choices":[{"index":0,"delta":'
    _TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self._prefix = b'data: {"id":' + _json(completion_id) + b',"object":"chat.completion.chunk","created":%d,"model":' % created + _json(model) + b","
        self._head = self._prefix + self._OPEN

    def role(self) -> bytes:
        return self._head + b'{"role":"assistant","content":""}' + self._TAIL

    def content(self, text: str) -> bytes:
        return self._head + b'{"content":' + _json(text) + b"}" + self._TAIL

    def reasoning(self, text: str) -> bytes:
        return self._head + b'{"reasoning_content":' + _json(text) + b"}" + self._TAIL

    def tool_call_head(self, index: int, call_id: str, name: str) -> bytes:
        call = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        return self._head + b'{"tool_calls":[' + _json(call) + b"]}" + self._TAIL

    def tool_call_arguments(self, index: int, arguments: str) -> bytes:
        call = {"index": index, "function": {"arguments": arguments}}
        return self._head + b'{"tool_calls":[' + _json(call) + b"]}" + self._TAIL

    def function_call_head(self, name: str) -> bytes:
        return self._head + b'{"function_call":' + _json({"name": name, "arguments": ""}) + b"}" + self._TAIL

    def function_call_arguments(self, arguments: str) -> bytes:
        return self._head + b'{"function_call":' + _json({"arguments": arguments}) + b"}" + self._TAIL

    def finish(self, reason: str) -> bytes:
        # No usage here even when nobody asked for a usage chunk: AutoGen's client ignores the
        # finish_reason of any chunk that carries usage.
        return self._head + b'{},"logprobs":null,"finish_reason":' + _json(reason) + b"}]}\n\n"

    def usage(self, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0, cached_tokens: int = 0) -> bytes:
        """The ``stream_options.include_usage`` chunk: no choices, only usage."""
        return self._prefix + b'"choices":[],"usage":' + _usage(prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens) + b"}\n\n"

    @staticmethod
    def error(body: dict[str, object]) -> bytes:
        """A mid-stream error: an ``error`` object and no ``choices`` (Dify then shows it)."""
        return b"data: " + _json(body) + b"\n\n"


class ChunkWriter(Batched):
    """The streamed Chat Completions response: each part of :class:`duet.api._rendering.Renderer` as
    chunk bytes, kept until :meth:`take` (once per batch of events, so a batch is one write)."""

    __slots__ = ("encoder", "_include_usage", "_out")

    def __init__(self, encoder: ChunkEncoder, include_usage: bool) -> None:
        self.encoder = encoder
        self._include_usage = include_usage
        self._out: list[bytes] = []

    def start(self) -> None:
        self._out.append(self.encoder.role())

    def reasoning(self, text: str) -> None:
        self._out.append(self.encoder.reasoning(text))

    def content(self, text: str) -> None:
        self._out.append(self.encoder.content(text))

    def tool_call(self, index: int, call: ToolCall) -> None:
        self._out += (self.encoder.tool_call_head(index, call.id, call.name), self.encoder.tool_call_arguments(index, call.arguments))

    def function_call(self, call: ToolCall) -> None:
        self._out += (self.encoder.function_call_head(call.name), self.encoder.function_call_arguments(call.arguments))

    def finish(self, reason: WireFinishReason, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
               cached_tokens: int = 0) -> None:
        self._out.append(self.encoder.finish(reason))
        if self._include_usage:
            self._out.append(self.encoder.usage(prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens))
        self._out.append(DONE)

    def error(self, error: APIError) -> None:
        self._out.append(self.encoder.error(error.body()))
