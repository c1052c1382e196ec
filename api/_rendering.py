"""The duet's events as the parts of one response: how reasoning is shown, legacy function calls,
the break between reasoning sources and the usage sums are decided here, once, for every protocol.

A protocol is a :class:`ResponseWriter`: it writes each part its own way. Chat Completions has two,
the streamed chunks (:class:`duet.api.chat._stream.ChunkWriter`) and the collected body
(:class:`duet.api.chat._fold.CompletionFold`), so what a client assembles from the stream is the
body a non-streaming client gets. Another output protocol is another writer over the same parts.

The parts of a successful response, in order: ``start``, then any number of ``reasoning`` /
``content`` texts (never empty) and ``tool_call`` s (or one legacy ``function_call``), then ``finish``
once. A failed one ends with ``error`` instead of ``finish``.
"""

from __future__ import annotations

from typing import Protocol

from duet.agents import (
    REASONER_NAME,
    ContentDelta,
    DuetEvent,
    Failed,
    Finished,
    ReasoningDelta,
    ReasoningOutput,
    ReasoningParagraphs,
    ToolCall,
    ToolCallsRequested,
    Usage,
)

from duet.api._errors import APIError, as_api_error
from duet.api._wire import WireFinishReason

THINK_OPEN = "<think>\n"
THINK_CLOSE = "\n</think>\n\n"


class ResponseWriter(Protocol):
    """What a protocol writes for each part of a response."""

    def start(self) -> None:
        """The response begins (before any event)."""

    def reasoning(self, text: str) -> None:
        """Reasoning shown apart from the answer (``reasoning_output: reasoning_content``)."""

    def content(self, text: str) -> None:
        """Answer text (with ``reasoning_output: think``, also the reasoning in its ``<think>`` block)."""

    def tool_call(self, index: int, call: ToolCall) -> None:
        """A call of a client tool; ``index`` counts the calls of the response from 0."""

    def function_call(self, call: ToolCall) -> None:
        """The one call a legacy ``functions`` client gets."""

    def finish(self, reason: WireFinishReason, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
               cached_tokens: int = 0) -> None:
        """The response is complete; the token counts are the whole run's (``reasoning_tokens``, part of
        ``completion_tokens``: the reasoning model's output tokens and the answer model's own reasoning tokens;
        ``cached_tokens``, part of ``prompt_tokens``: what the upstreams read from their prompt caches)."""

    def error(self, error: APIError) -> None:
        """The run failed after the response began."""


class Batched:
    """What a stream writer wrote since the last :meth:`take` (its ``_out`` list), handed over once
    per batch of events, so a batch is one write: the usual batch of one part as it is (no copy), a
    long one (a reader that fell behind) joined once, in linear time. Every protocol's stream writer
    takes its bytes this way."""

    __slots__ = ()
    _out: list[bytes]

    def take(self) -> bytes:
        out = self._out
        if not out:
            return b""
        self._out = []  # type: ignore[misc]  # the slot is declared by each writer class
        return out[0] if len(out) == 1 else b"".join(out)


class Renderer:
    """Turns one run's events into the parts of its response, in the order they come.

    ``reasoning_output``: ``reasoning_content`` writes reasoning parts; ``think`` writes the reasoning
    as content inside ``<think>\\n … \\n</think>\\n\\n`` (closed before the answer, a tool call or the
    end); ``hidden`` drops it. ``legacy``: the client sent ``functions``, so it gets one
    ``function_call`` and the finish reason ``function_call``.
    """

    __slots__ = (
        "_writer", "_content", "_reasoning", "_legacy", "_paragraphs", "_think_open", "_calls", "_prompt_tokens", "_completion_tokens",
        "_reasoning_tokens", "_cached_tokens",
    )

    def __init__(self, writer: ResponseWriter, reasoning_output: ReasoningOutput, legacy: bool) -> None:
        self._writer = writer
        self._content = writer.content  # bound once: the hottest calls
        # What a reasoning text becomes, chosen once: a reasoning part, think-block content, or nothing.
        self._reasoning = {"reasoning_content": writer.reasoning, "think": self._think, "hidden": None}[reasoning_output]
        self._legacy = legacy
        self._paragraphs = ReasoningParagraphs()
        self._think_open = False
        self._calls = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._reasoning_tokens = 0
        self._cached_tokens = 0

    def start(self) -> None:
        self._writer.start()

    def render(self, event: DuetEvent) -> None:
        # Deltas first: they are nearly every event.
        match event:
            case ContentDelta():
                if event.text:
                    if self._think_open:
                        self._close_think()
                    self._content(event.text)
            case ReasoningDelta():
                if event.text and self._reasoning is not None:
                    self._reasoning(self._paragraphs.text(event))
            case Usage():
                self._prompt_tokens += event.prompt_tokens
                self._completion_tokens += event.completion_tokens
                self._cached_tokens += event.cached_tokens
                if event.source == REASONER_NAME:
                    # The reasoner's output is all reasoning; an answer model's own reasoning is what its upstream reported.
                    self._reasoning_tokens += event.completion_tokens
                else:
                    self._reasoning_tokens += event.reasoning_tokens
            case ToolCallsRequested():
                if self._think_open:
                    self._close_think()
                self._tool_calls(event.calls)
            case Finished():
                if self._think_open:
                    self._close_think()
                reason: WireFinishReason = event.finish_reason
                if self._legacy and reason == "tool_calls":
                    reason = "function_call"
                self._writer.finish(reason, self._prompt_tokens, self._completion_tokens, self._reasoning_tokens, self._cached_tokens)
            case Failed():
                if self._think_open:
                    self._close_think()
                self._writer.error(as_api_error(event.error))

    def _think(self, text: str) -> None:
        if self._think_open:
            self._content(text)
        else:
            self._think_open = True
            self._content(THINK_OPEN + text)

    def _close_think(self) -> None:
        self._think_open = False
        self._content(THINK_CLOSE)

    def _tool_calls(self, calls: list[ToolCall]) -> None:
        if self._legacy:
            for call in calls[:1]:  # legacy clients take one call (the answer agent asked its model for one)
                self._writer.function_call(call)
            return
        for call in calls:
            self._writer.tool_call(self._calls, call)
            self._calls += 1
