"""The stream accumulator: one model call's answer put together from what its upstream sent, and the
pieces to hand on as it arrives. Pure: no sockets, no asyncio (the client reads, this reads what was read).

Where each part of the OpenAI chunk format is read (a model server's dialect lands in its place):

- what a chunk is — an answer's choice, the usage, the finish reason: :meth:`StreamAccumulator.read`;
  ``[DONE]`` and what is not a chunk: :meth:`StreamAccumulator._not_a_chunk`; a chunk without
  choices (an error object): :meth:`StreamAccumulator._without_choices`;
- reasoning — ``reasoning_content`` or ``reasoning`` (the first spelling seen is the one the model
  wants back: :meth:`StreamAccumulator._reasoning_begins`), ``reasoning_details``
  (:meth:`StreamAccumulator._take_details`);
- answer text, and how text is batched into pieces: :meth:`StreamAccumulator.read`;
- tool calls: :meth:`StreamAccumulator._add_tool_deltas`, each call by a :class:`ToolCallBuilder`;
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
from duet.agents._text_parts import UNKEPT, TextParts
from duet.agents._thinking import OPEN_TAG, ReasoningText, strip_think_blocks
from duet.agents._upstream_calls import UpstreamCall
from duet.agents.upstream._errors import error_object
from duet.agents.upstream._result import UpstreamResult, build_result

JOINED_CHUNKS = 16
JOINED_CHARS = 4096
"""The most text one piece joins from the chunks of one read (chunks, characters): the agents' event
channel is bounded in events (:data:`~duet.agents.pipeline._stream.MAX_BUFFERED_EVENTS`), so the text a piece
may carry bounds what a client that stops reading leaves buffered."""


FAILED_FINISHES = {"error": "the upstream reported an error", "network_error": "the model's inference failed"}
"""Finish reasons that say the answer failed (OpenRouter's ``error``, Zhipu's ``network_error``), with
what they mean when no error object comes with them."""


def content_chunks(parts: Any, reasoning: str | None = None) -> tuple[str, str]:
    """Content sent as a list of typed chunks (Mistral's Magistral models): its thinking (after
    ``reasoning``, the delta's own) and its text.

    >>> content_chunks([{"type": "thinking", "thinking": [{"type": "text", "text": "Hm."}]}, {"type": "text", "text": "Hi"}])
    ('Hm.', 'Hi')
    """
    thought: list[str] = [reasoning] if reasoning else []
    text: list[str] = []
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "thinking":
            inner = part.get("thinking")
            thought.append(inner if isinstance(inner, str) else content_chunks(inner)[1])
        elif isinstance(part.get("text"), str):
            text.append(part["text"])
    return "".join(thought), "".join(text)


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

    __slots__ = ("id", "name", "arguments", "extra")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []
        self.extra: dict[str, Any] | None = None

    def add(self, delta: Mapping[str, Any]) -> None:
        # Called for every fragment a call streams: written to make few calls (a loop over the keys, not
        # a keys view; the id asked for until one came; a str told by its class before isinstance).
        if not self.id:
            self.id = delta.get("id") or ""
        for key in delta:
            if key not in _CALL_KEYS:  # provider fields beside the call's own
                self._keep_extra(delta)
                break
        function = delta.get("function")
        if not function:
            return
        name = function.get("name")
        # Some servers repeat the full name in every delta, others split it: only append new text.
        if name and name != self.name:
            self.name += name
        arguments = function.get("arguments")
        if arguments:  # a string, or (some servers) the arguments as an object
            self.arguments.append(arguments if arguments.__class__ is str or isinstance(arguments, str) else json.dumps(arguments))

    def _keep_extra(self, delta: Mapping[str, Any]) -> None:
        """Provider fields of the call (Gemini's ``extra_content``), kept to be sent back as they came."""
        for key, value in delta.items():
            if key not in _CALL_KEYS and value is not None:
                if self.extra is None:
                    self.extra = {}
                self.extra[key] = value

    def build(self) -> FunctionCall:
        arguments = "".join(self.arguments) or "{}"
        if self.extra:
            return UpstreamCall(id=self.id, name=self.name, arguments=arguments, extra=self.extra)
        return FunctionCall(id=self.id, name=self.name, arguments=arguments)


_CALL_KEYS = frozenset(("index", "id", "type", "function"))
"""The fields of a tool call (or of its delta) in OpenAI's format; any other is a provider's."""


class StreamAccumulator:
    """One model call's answer, from a stream's events read by read (:meth:`read`) or from a whole
    ``chat.completion`` body (:meth:`read_completion`).

    :meth:`read` returns the pieces to hand on: reasoning as :class:`~duet.agents.ReasoningText`, the
    answer as ``str``. The text of one read goes on as few pieces, in order: the model's first token
    alone (at :attr:`first_piece`, for the caller to hand on at once), then at most
    :data:`JOINED_CHUNKS` chunks or :data:`JOINED_CHARS` characters a piece, a new piece where
    reasoning turns to answer or back; a burst of tokens costs the caller a few events, not one each.
    A read stops (:attr:`ended`) at ``[DONE]`` (:attr:`done`) or at a chunk that fails the stream
    (:attr:`failure`, for the caller to raise once the pieces before it are handed on).

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

    __slots__ = ("model", "awaiting_first_token", "first_piece", "ended", "done", "failure", "answered", "finish_reason",
                 "usage", "reasoning_field", "_joined_limit", "_pending_kind", "_content", "_thought", "_details", "_calls")

    def __init__(self, model: str, keep_text: bool = True) -> None:
        """``keep_text=False``: the stream's reader keeps the text itself, and the result carries none
        of it (its content ``""``, its thought ``None``; tool calls and usage as ever)."""
        self.model = model
        self.awaiting_first_token = True
        """No text (nor tool call) has come yet: the first is handed on alone, at once."""
        self._joined_limit = 1
        """The most chunks a piece joins: 1 while the first token is awaited (it goes on alone), then
        :data:`JOINED_CHUNKS`."""
        self._pending_kind: type[str] = str
        """The kind of the text handed on last (a piece of the other kind begins a new piece)."""
        self.first_piece = -1
        """Where the first token is among the pieces the last :meth:`read` returned (-1: not among them)."""
        self.ended = False
        """The stream ends here: ``[DONE]`` arrived, or a chunk failed it."""
        self.done = False
        """``[DONE]`` arrived."""
        self.failure: UpstreamError | None = None
        """What failed the stream: a chunk that is not one, an error object."""
        self.answered = False
        """A chunk with a choice arrived."""
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.reasoning_field: ReasoningField | None = None
        self._content = TextParts() if keep_text else UNKEPT
        self._thought = TextParts() if keep_text else UNKEPT
        self._details: list[Any] = []  # reasoning_details fragments
        self._calls: defaultdict[int, ToolCallBuilder] = defaultdict(ToolCallBuilder)  # by index

    def read(self, events: list[bytes]) -> list[str]:
        """The pieces to hand on for one read's events (see the class): a chunk of text costs no call but this one."""
        pieces: list[str] = []
        pending: list[str] = []  # text not handed on yet, all of one kind
        pending_kind, pending_size, limit = self._pending_kind, 0, self._joined_limit
        self.first_piece = -1
        for data in events:
            if data == b"[DONE]":  # the end: not JSON, so not handed to two decoders (orjson, then json) to learn it
                self._not_a_chunk(data)
                break
            try:
                chunk = wire_json.loads(data)
                choices = chunk.get("choices")  # AttributeError: not a JSON object
            except (ValueError, AttributeError):
                self._not_a_chunk(data)  # [DONE], or a fault
                break
            if chunk.get("usage"):  # on a trailing chunk without choices (OpenAI), or on the last one
                self.usage = chunk["usage"]
            if not choices:
                if self._without_choices(chunk):
                    break
                continue
            self.answered = True
            choice = choices[0]
            if choice.get("finish_reason"):
                self._finishes(chunk, choice)  # a failed finish ends the stream: nothing after it is read
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if delta.get("reasoning_details"):
                reasoning = self._take_details(delta["reasoning_details"], reasoning)
            text = delta.get("content")
            if text.__class__ is list:  # Mistral's Magistral: a list of thinking and text chunks
                reasoning, text = content_chunks(text, reasoning)
            if reasoning:
                self._thought.append(reasoning)
                if pending_kind is not ReasoningText:  # reasoning begins, or answer text came before it
                    self._reasoning_begins(delta, pieces, pending)
                    pending_kind, pending_size = ReasoningText, 0
                pending.append(reasoning)
                pending_size += len(reasoning)
            if text:
                self._content.append(text)
                if pending_kind is not str:  # reasoning before: a piece of its own
                    _hand_on(pieces, pending, pending_kind)
                    pending_kind, pending_size = str, 0
                pending.append(text)
                pending_size += len(text)
            if len(pending) >= limit or pending_size >= JOINED_CHARS:
                if limit == 1:  # the first token
                    self.first_piece, limit = len(pieces), JOINED_CHUNKS
                _hand_on(pieces, pending, pending_kind)
                pending_size = 0
            if delta.get("tool_calls"):
                limit = JOINED_CHUNKS  # a call is handed on whole, at its end: nothing to hurry
                self._add_tool_deltas(delta["tool_calls"])
        return self._read_ends(pieces, pending, pending_kind, limit)

    def _read_ends(self, pieces: list[str], pending: list[str], pending_kind: type[str], limit: int) -> list[str]:
        """The end of :meth:`read`: what is pending goes out with this read's pieces, and what the
        next read goes on from is kept."""
        if pending:
            pieces.append(pending_kind("".join(pending)))
        self._pending_kind, self._joined_limit = pending_kind, limit
        self.awaiting_first_token = limit == 1
        return pieces

    def _finishes(self, chunk: dict[str, Any], choice: dict[str, Any]) -> None:
        """A chunk that ends the answer (it has a ``finish_reason``): the usage where a server puts it
        beside the finish (Groq's ``x_groq.usage``, Moonshot's ``choices[0].usage``), and a finish that
        is a failure (OpenRouter's ``error`` beside ``finish_reason: "error"``, Zhipu's ``network_error``),
        which fails the stream."""
        finish = self.finish_reason = choice["finish_reason"]
        if not self.usage:
            usage = choice.get("usage") or (chunk.get("x_groq") or {}).get("usage")
            if isinstance(usage, dict):
                self.usage = usage
        error = chunk.get("error")
        if error or finish in FAILED_FINISHES:
            where = f"failed mid-stream (finish_reason {finish!r})"
            self.failure = error_object(error or {"message": FAILED_FINISHES.get(finish, finish)}, where, self.model)
            self.ended = True

    def _not_a_chunk(self, data: bytes) -> None:
        """``[DONE]``, or an event whose data is not a JSON object (which fails the stream): the end."""
        self.ended = True
        if data == b"[DONE]":
            self.done = True
            return
        try:
            wire_json.loads(data)
        except ValueError:
            self.failure = UpstreamProtocolError(f"sent a chunk that is not JSON: {data[:200]!r}", model=self.model)
            return
        self.failure = UpstreamProtocolError(f"sent a chunk that is not a JSON object: {data[:200]!r}", model=self.model)

    def _without_choices(self, chunk: dict[str, Any]) -> bool:
        """A chunk without choices: the usage alone (read already), or an error (OpenAI's ``error``
        field, vLLM's error object), which fails the stream. Returns whether the stream stops here."""
        error = chunk.get("error") or (chunk if chunk.get("object") == "error" else None)
        if error:
            self.failure = error_object(error, "failed mid-stream" if self.answered else "sent an error", self.model)
            self.ended = True
        return self.ended

    def _reasoning_begins(self, delta: Mapping[str, Any], pieces: list[str], pending: list[str]) -> None:
        """Reasoning comes (first in a read, or after answer text): the answer text before it goes on
        as a piece of its own; the first reasoning says how this upstream spells it."""
        _hand_on(pieces, pending, str)
        if self.reasoning_field is None:
            self.reasoning_field = "reasoning_content" if delta.get("reasoning_content") else "reasoning"

    def _take_details(self, fragments: Any, reasoning: str | None) -> str | None:
        """Keeps the ``reasoning_details`` fragments of a delta; returns the delta's reasoning (their
        text, from an upstream that sends only details)."""
        if not isinstance(fragments, list):
            return reasoning
        self._details += fragments
        self.reasoning_field = "reasoning_details"  # what a model that sends them wants back
        return reasoning or details_text(fragments)

    def _add_tool_deltas(self, tool_deltas: list[dict[str, Any]]) -> None:
        """A delta's tool-call fragments, each added to its call: the call at its ``index``; without
        one, a fragment with an ``id`` starts a new call and one without continues the last."""
        calls = self._calls
        for tool_delta in tool_deltas:
            index = tool_delta.get("index")
            if index is None:
                index = len(calls) - 1 if calls and not tool_delta.get("id") else len(calls)
            calls[index].add(tool_delta)

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
        if text.__class__ is not str:  # Magistral: thinking and text chunks
            thought, text = content_chunks(text)
            if thought and not reasoning:
                reasoning, reasoning_field = thought, "reasoning"
        if reasoning and text.lstrip().startswith(OPEN_TAG):  # llama.cpp's deepseek-legacy: the thinking again, tagged
            text = strip_think_blocks(text)
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
