"""The stream accumulator: one model call's answer put together from what its upstream sent, and the
pieces to hand on as it arrives. Pure: no sockets, no asyncio (the client reads, this reads what was read).

Where each part of the OpenAI chunk format is read (a model server's dialect lands in its place):

- what a chunk is — an answer's delta, ``[DONE]``, something that is not a chunk, an error object,
  the usage, the finish reason: :meth:`StreamAccumulator._deltas`, errors by :meth:`StreamAccumulator._error_in`;
- reasoning — ``reasoning_content`` or ``reasoning`` (the first spelling seen is the one the model
  wants back), ``reasoning_details`` (:meth:`StreamAccumulator._take_details`): :meth:`StreamAccumulator.read`;
- answer text, and how text is batched into pieces: :meth:`StreamAccumulator.read`;
- tool calls: :meth:`StreamAccumulator.read` (a fragment without an index: :meth:`StreamAccumulator._unindexed`),
  each call by a :class:`ToolCallBuilder`;
- how a stream ended: :meth:`StreamAccumulator.unfinished`; the answer: :meth:`StreamAccumulator.result`;
- a whole ``chat.completion`` body: :meth:`StreamAccumulator.read_completion`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Mapping

from autogen_core import FunctionCall

from duet import _wire_json as wire_json
from duet.agents._errors import UpstreamConnectionError, UpstreamError, UpstreamProtocolError
from duet.agents._model_reasoning import ReasoningField, details_text, merge_details
from duet.agents._text_parts import TextParts
from duet.agents._thinking import ReasoningText
from duet.agents.upstream._errors import error_object
from duet.agents.upstream._result import UpstreamResult, build_result

JOINED_CHUNKS = 16
JOINED_CHARS = 4096
"""The most text one piece joins from the chunks of one read (chunks, characters): the agents' event
channel is bounded in events (:data:`~duet.agents.pipeline._stream.MAX_BUFFERED_EVENTS`), so the text a piece
may carry bounds what a client that stops reading leaves buffered."""


def _hand_on(pieces: list[str], pending: list[str], kind: type[str]) -> None:
    """The ``pending`` text, if any, as one piece of ``kind`` at the end of ``pieces``."""
    if pending:
        pieces.append(kind("".join(pending)))
        pending.clear()


class ToolCallBuilder:
    """One tool call, put together from the deltas an upstream streams for it (or its whole entry).

    >>> call = ToolCallBuilder()
    >>> for delta in ({"id": "call_1", "function": {"name": "wea"}}, {"function": {"name": "ther", "arguments": '{"city"'}},
    ...               {"function": {"arguments": ': "Oslo"}'}}):
    ...     call.add(delta)
    >>> call.build()
    FunctionCall(id='call_1', arguments='{"city": "Oslo"}', name='weather')
    """

    __slots__ = ("id", "name", "arguments")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []

    def add(self, delta: Mapping[str, Any]) -> None:
        if delta.get("id") and not self.id:
            self.id = delta["id"]
        function = delta.get("function") or {}
        name = function.get("name")
        # Some servers repeat the full name in every delta, others split it: only append new text.
        if name and name != self.name:
            self.name += name
        arguments = function.get("arguments")
        if arguments:  # a string, or (some servers) the arguments as an object
            self.arguments.append(arguments if isinstance(arguments, str) else json.dumps(arguments))

    def build(self) -> FunctionCall:
        return FunctionCall(id=self.id, name=self.name, arguments="".join(self.arguments) or "{}")


class StreamAccumulator:
    """One model call's answer, from a stream's events read by read (:meth:`read`) or from a whole
    ``chat.completion`` body (:meth:`read_completion`).

    :meth:`read` returns the pieces to hand on: reasoning as :class:`~duet.agents.ReasoningText`, the
    answer as ``str``. The text of one read goes on as few pieces, in order: the model's first token
    alone (at :attr:`first_piece`, for the caller to hand on at once), then at most
    :data:`JOINED_CHUNKS` chunks or :data:`JOINED_CHARS` characters a piece, a new piece where
    reasoning turns to answer or back; a burst of tokens costs the caller a few events, not one each.
    A read stops at ``[DONE]`` (:attr:`done`) or at a chunk that fails the stream (:attr:`failure`,
    for the caller to raise once the pieces before it are handed on).

    >>> stream = StreamAccumulator("m")
    >>> pieces = stream.read([b'{"choices": [{"delta": {"reasoning_content": "Hm."}}]}',
    ...                       b'{"choices": [{"delta": {"content": "Hi"}}]}', b'{"choices": [{"delta": {"content": "!"}}]}'])
    >>> [(type(piece).__name__, piece) for piece in pieces], stream.first_piece
    ([('ReasoningText', 'Hm.'), ('str', 'Hi!')], 0)
    >>> stream.read([b'{"choices": [{"delta": {}, "finish_reason": "stop"}]}', b'[DONE]']), stream.done
    ([], True)
    >>> result = stream.result()
    >>> result.content, result.thought, result.finish_reason, result.reasoning_field
    ('Hi!', 'Hm.', 'stop', 'reasoning_content')
    """

    __slots__ = ("model", "awaiting_first_token", "first_piece", "done", "failure", "answered", "finish_reason", "usage",
                 "reasoning_field", "_content", "_thought", "_details", "_calls")

    def __init__(self, model: str) -> None:
        self.model = model
        self.awaiting_first_token = True
        """No text (nor tool call) has come yet: the first is handed on alone, at once."""
        self.first_piece = -1
        """Where the first token is among the pieces the last :meth:`read` returned (-1: not among them)."""
        self.done = False
        """``[DONE]`` arrived."""
        self.failure: UpstreamError | None = None
        """What failed the stream: a chunk that is not one, an error object."""
        self.answered = False
        """A chunk with a choice arrived."""
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.reasoning_field: ReasoningField | None = None
        self._content = TextParts()
        self._thought = TextParts()
        self._details: list[Any] = []  # reasoning_details fragments
        self._calls: defaultdict[int, ToolCallBuilder] = defaultdict(ToolCallBuilder)  # by index

    def read(self, events: list[bytes]) -> list[str]:
        """The pieces to hand on for the ``data`` of the events of one read, in order (see the class)."""
        pieces: list[str] = []
        pending: list[str] = []  # text not handed on yet, all of one kind
        pending_kind: type[str] = str
        pending_size = 0
        first_token = self.awaiting_first_token
        thought, content, calls = self._thought, self._content, self._calls
        self.first_piece = -1
        for delta in self._deltas(events):
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            detail_fragments = delta.get("reasoning_details")
            if detail_fragments:
                reasoning = self._take_details(detail_fragments, reasoning)
            if reasoning:
                if self.reasoning_field is None:  # the first spelling seen
                    self.reasoning_field = "reasoning_content" if delta.get("reasoning_content") else "reasoning"
                thought.append(reasoning)
                if pending_kind is not ReasoningText:  # answer text before: a piece of its own
                    _hand_on(pieces, pending, pending_kind)
                    pending_kind, pending_size = ReasoningText, 0
                pending.append(reasoning)
                pending_size += len(reasoning)
            text = delta.get("content")
            if text:
                content.append(text)
                if pending_kind is not str:  # reasoning before: a piece of its own
                    _hand_on(pieces, pending, pending_kind)
                    pending_kind, pending_size = str, 0
                pending.append(text)
                pending_size += len(text)
            if first_token and pending:
                first_token = False
                self.first_piece = len(pieces)
                _hand_on(pieces, pending, pending_kind)
                pending_size = 0
            elif len(pending) >= JOINED_CHUNKS or pending_size >= JOINED_CHARS:
                _hand_on(pieces, pending, pending_kind)
                pending_size = 0
            tool_deltas = delta.get("tool_calls")
            if tool_deltas:
                first_token = False  # a call is handed on whole, at its end: nothing to hurry
                for tool_delta in tool_deltas:  # each fragment to its call (by index; without one, see _unindexed)
                    index = tool_delta.get("index")
                    calls[self._unindexed(tool_delta) if index is None else index].add(tool_delta)
        _hand_on(pieces, pending, pending_kind)
        self.awaiting_first_token = first_token
        return pieces

    def _deltas(self, events: list[bytes]) -> list[dict[str, Any]]:
        """The deltas of the answer's choice in ``events``, up to ``[DONE]`` or a chunk that fails the
        stream; notes the usage and the finish reason the chunks carry."""
        deltas: list[dict[str, Any]] = []
        for data in events:
            if data == b"[DONE]":
                self.done = True
                break
            try:
                chunk = wire_json.loads(data)
            except ValueError:
                self.failure = UpstreamProtocolError(f"sent a chunk that is not JSON: {data[:200]!r}", model=self.model)
                break
            if not isinstance(chunk, dict):
                self.failure = UpstreamProtocolError(f"sent a chunk that is not a JSON object: {data[:200]!r}", model=self.model)
                break
            if chunk.get("usage"):  # on a trailing chunk without choices (OpenAI), or on the last one
                self.usage = chunk["usage"]
            choices = chunk.get("choices")
            if not choices:
                self.failure = self._error_in(chunk)
                if self.failure is not None:
                    break
                continue
            self.answered = True
            choice = choices[0]
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            deltas.append(choice.get("delta") or {})
        return deltas

    def _error_in(self, chunk: dict[str, Any]) -> UpstreamError | None:
        """The error a chunk without choices carries: OpenAI's ``error`` field, or vLLM's error object."""
        error = chunk.get("error") or (chunk if chunk.get("object") == "error" else None)
        if not error:
            return None
        return error_object(error, "failed mid-stream" if self.answered else "sent an error", self.model)

    def _take_details(self, fragments: Any, reasoning: str | None) -> str | None:
        """Keeps the ``reasoning_details`` fragments of a delta; returns the delta's reasoning (their
        text, from an upstream that sends only details)."""
        if not isinstance(fragments, list):
            return reasoning
        self._details += fragments
        self.reasoning_field = "reasoning_details"  # what a model that sends them wants back
        return reasoning or details_text(fragments)

    def _unindexed(self, tool_delta: Mapping[str, Any]) -> int:
        """The call a tool-call fragment without an ``index`` belongs to: with an ``id``, a new one;
        without, the last one (a new one if there is none)."""
        calls = self._calls
        return len(calls) - 1 if calls and not tool_delta.get("id") else len(calls)

    def unfinished(self, content_type: str) -> UpstreamError | None:
        """The error of a stream (of ``content_type``) that ended without an answer, or before the
        model finished; ``None`` when it finished."""
        if not self.answered:
            if content_type != "text/event-stream" and not self.done:
                return UpstreamProtocolError(f"answered HTTP 200 with {content_type} that holds no event stream", model=self.model)
            return UpstreamProtocolError("ended the stream without an answer (no choices)", model=self.model)
        if not self.done and self.finish_reason is None:
            return UpstreamConnectionError("ended the stream before the model finished", model=self.model)
        return None

    def result(self) -> UpstreamResult:
        """The answer the stream held."""
        calls = [self._calls[index].build() for index in sorted(self._calls)]
        details = merge_details(self._details) if self._details else None
        return build_result(self._content.join(), self._thought.join() or None, calls, self.finish_reason, self.usage,
                            self.reasoning_field, details)

    def read_completion(self, raw: bytes) -> tuple[list[str], UpstreamResult]:
        """A whole ``chat.completion`` body (from an upstream that ignores ``stream: true``): the
        pieces a stream would have given, and its result. Raises the error an error object stands
        for, or :class:`~duet.agents._errors.UpstreamProtocolError` for a body that is no completion."""
        completion, choice = self._completion_choice(raw)
        message = choice.get("message") or {}
        reasoning_field: ReasoningField | None = next(
            (field for field in ("reasoning_content", "reasoning") if message.get(field)), None
        )
        reasoning = message.get(reasoning_field) if reasoning_field else ""
        details = message.get("reasoning_details")
        if not (isinstance(details, list) and details):
            details = None
        else:
            reasoning_field = "reasoning_details"
            reasoning = reasoning or details_text(details)
        text = message.get("content") or ""
        calls: list[FunctionCall] = []
        for call in message.get("tool_calls") or []:
            builder = ToolCallBuilder()
            builder.add(call)
            calls.append(builder.build())
        pieces: list[str] = [ReasoningText(reasoning)] if reasoning else []
        if text:
            pieces.append(text)
        return pieces, build_result(text, reasoning or None, calls, choice.get("finish_reason") or "stop",
                                    completion.get("usage"), reasoning_field, details)

    def _completion_choice(self, raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
        """A ``chat.completion`` body and its first choice; raises for an error object or a body that
        is no completion."""
        try:
            completion = json.loads(raw)
        except ValueError:
            completion = None
        if isinstance(completion, dict) and (completion.get("error") or completion.get("object") == "error"):
            raise error_object(completion.get("error") or completion, "answered HTTP 200 with an error", self.model)
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            text = " ".join(raw.decode("utf-8", "replace").split())[:200]
            raise UpstreamProtocolError(f"answered HTTP 200 with JSON that is not a chat completion: {text!r}", model=self.model)
        assert isinstance(completion, dict)
        return completion, choices[0]
