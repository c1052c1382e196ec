"""The streamed Anthropic Messages response: named SSE events (``event: X\\ndata: {...}\\n\\n``).

The sequence, as the Anthropic SDK accumulates it: ``message_start`` (the message, no content yet);
per content block ``content_block_start``, its deltas (``thinking_delta`` then one
``signature_delta``, ``text_delta``, ``input_json_delta``) and ``content_block_stop``;
``message_delta`` (``stop_reason`` and the run's usage); ``message_stop``. A quiet stream gets
``event: ping`` (:data:`PING`); a run that fails after the first byte ends with one ``event: error``.
The shapes are :mod:`duet.api.messages._protocol`'s models; a unit test holds these bytes equal to them.
"""

from __future__ import annotations

from typing import Any

from duet._wire_json import dumps as _json
from duet.agents import ToolCall

from duet.api._rendering import Batched
from duet.api._errors import APIError
from duet.api._wire import WireFinishReason
from duet.api.messages._errors import error_event
from duet.api.messages._protocol import STOP_REASONS, MessageUsage, thinking_signature, tool_input_json

PING = b'event: ping\ndata: {"type":"ping"}\n\n'




_THINKING, _TEXT = 1, 2  # the kind of the open block

_DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":'
_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
_START = b'event: content_block_start\ndata: {"type":"content_block_start","index":%d,"content_block":'


class MessageStreamWriter(Batched):
    """A :class:`duet.api._rendering.ResponseWriter`: each part of a run as event bytes, kept until
    :meth:`take` (once per batch of events, so a batch is one write). Reasoning is a ``thinking``
    block, answer text a ``text`` block, each client tool call a ``tool_use`` block; a part of
    another kind than the open block closes it and opens the next."""

    __slots__ = ("_message_id", "_model", "_out", "_index", "_open", "_delta_head")

    def __init__(self, message_id: str, model: str) -> None:
        self._message_id = message_id
        self._model = model
        self._out: list[bytes] = []
        self._index = -1  # of the newest block
        self._open = 0  # _THINKING, _TEXT or 0 (none open)
        self._delta_head = b""  # of the open block's deltas: rendered once per block, not per delta


    def start(self) -> None:
        message: dict[str, Any] = {"id": self._message_id, "type": "message", "role": "assistant", "model": self._model, "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        self._out.append(b"event: message_start\ndata: " + _json({"type": "message_start", "message": message}) + b"\n\n")

    def reasoning(self, text: str) -> None:
        if self._open != _THINKING:
            self._open_block(_THINKING, b'{"type":"thinking","thinking":"","signature":""}}\n\n')
            self._delta_head = _DELTA % self._index + b'"thinking_delta","thinking":'
        self._out.append(self._delta_head + _json(text) + b"}}\n\n")

    def content(self, text: str) -> None:
        if self._open != _TEXT:
            self._open_block(_TEXT, b'{"type":"text","text":""}}\n\n')
            self._delta_head = _DELTA % self._index + b'"text_delta","text":'
        self._out.append(self._delta_head + _json(text) + b"}}\n\n")

    def tool_call(self, index: int, call: ToolCall) -> None:
        self._open_block(0, b'{"type":"tool_use","id":' + _json(call.id) + b',"name":' + _json(call.name) + b',"input":{}}}\n\n')
        self._out += (
            _DELTA % self._index + b'"input_json_delta","partial_json":' + _json(tool_input_json(call.arguments)) + b"}}\n\n",
            _STOP % self._index,
        )

    def function_call(self, call: ToolCall) -> None:  # legacy OpenAI functions: not a Messages client's
        self.tool_call(0, call)

    def finish(self, reason: WireFinishReason, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
               cached_tokens: int = 0) -> None:
        self._close_block()
        usage = MessageUsage.of(prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens).model_dump(exclude_none=True)
        delta = {"type": "message_delta", "delta": {"stop_reason": STOP_REASONS[reason], "stop_sequence": None}, "usage": usage}
        self._out += (b"event: message_delta\ndata: " + _json(delta) + b"\n\n",
                      b'event: message_stop\ndata: {"type":"message_stop"}\n\n')

    def error(self, error: APIError) -> None:
        self._out.append(error_event(error))

    def _open_block(self, kind: int, block: bytes) -> None:
        self._close_block()
        self._index += 1
        self._open = kind
        self._out.append(_START % self._index + block)

    def _close_block(self) -> None:
        if self._open == _THINKING:
            signature = _json(thinking_signature(self._message_id))
            self._out.append(_DELTA % self._index + b'"signature_delta","signature":' + signature + b"}}\n\n")
        if self._open:
            self._out.append(_STOP % self._index)
        self._open = 0
