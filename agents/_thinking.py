"""Telling a model's thinking from its answer while the text streams in.

Thinking reaches an agent in one of three ways, and :class:`ReasoningSplitter` reads all three:

- Duet's :class:`~duet.agents.OpenAICompatibleClient` yields the upstream's ``reasoning_content``
  (or ``reasoning``) deltas as :class:`ReasoningText` pieces, already apart from the answer text:
  nothing to parse;
- AutoGen's ``OpenAIChatCompletionClient`` yields them as plain text, the first one prefixed with
  ``<think>``, then a separate ``</think>`` piece;
- models served without a reasoning parser (DeepSeek-R1 on older Ollama or vLLM) write the very
  same tags inline, in the answer text.

The last two are told apart by one tag parser, which runs on plain text only.
"""

from __future__ import annotations

import re

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"

_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)\s*", re.DOTALL)


class ReasoningText(str):
    """A streamed piece of the model's reasoning, as opposed to its answer text (a plain ``str``).

    A ``str``, so a client that yields it is still a valid AutoGen ``ChatCompletionClient``
    (whose ``create_stream`` yields ``str | CreateResult``) and a consumer that knows nothing of it
    sees the reasoning as text; Duet's agents tell it apart by its class (this one exactly: a
    subclass of it reads as plain text).

    >>> piece = ReasoningText("Check the units first.")
    >>> isinstance(piece, str), isinstance("The answer.", ReasoningText)
    (True, False)
    """

    __slots__ = ()


def strip_think_blocks(text: str) -> str:
    """Remove ``<think>…</think>`` blocks (Dify sends them back inside assistant content).

    >>> strip_think_blocks("<think>\\nplan\\n</think>\\n\\nAnswer")
    'Answer'
    """
    if OPEN_TAG not in text:
        return text
    return _THINK_BLOCK.sub("", text).strip()


def think_text(text: str) -> str:
    """The text inside the ``<think>`` blocks of ``text`` ('' when it has none).

    >>> think_text("<think>\\nplan\\n</think>\\n\\nAnswer")
    'plan'
    """
    if OPEN_TAG not in text:
        return ""
    blocks = (match.group(0) for match in _THINK_BLOCK.finditer(text))
    return "\n\n".join(part for part in (block[len(OPEN_TAG):].split(CLOSE_TAG, 1)[0].strip() for block in blocks) if part)


def _held_back(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that could be the start of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ReasoningSplitter:
    """Splits a model client's streamed pieces into (reasoning, content) pairs.

    A :class:`ReasoningText` piece is reasoning as it is. Plain text is parsed for ``<think>``
    tags: only a ``<think>`` at the start of the output (after whitespace) opens reasoning, so an
    answer that merely mentions the tag is left alone, and tags split across pieces are held back
    until they are complete. The answer after reasoning starts at its first non-blank character.

    >>> s = ReasoningSplitter()
    >>> [s.feed(p) for p in ["<thi", "nk>plan", "</think>\\n\\nHi"]]
    [('', ''), ('plan', ''), ('', 'Hi')]
    >>> s = ReasoningSplitter()
    >>> [s.feed(p) for p in [ReasoningText("plan"), "\\n\\nHi"]], s.reasoning_finished
    ([('plan', ''), ('', 'Hi')], True)
    """

    __slots__ = ("_state", "_pending", "_strip_leading", "_had_reasoning")

    # _REASONING: inside a <think> block of plain text; _TYPED_REASONING: ReasoningText pieces came.
    _START, _REASONING, _CONTENT, _TYPED_REASONING = 0, 1, 2, 3

    def __init__(self) -> None:
        self._state = self._START
        self._pending = ""
        self._strip_leading = False
        self._had_reasoning = False

    @property
    def reasoning_finished(self) -> bool:
        """Reasoning came, and the answer text after it has begun."""
        return self._had_reasoning and self._state == self._CONTENT

    def feed(self, piece: str) -> tuple[str, str]:
        """Returns the reasoning and the content in ``piece`` (reasoning always comes first)."""
        if piece.__class__ is ReasoningText:  # not isinstance: a third of the cost, on every piece
            if self._state == self._START:
                self._state = self._TYPED_REASONING
                self._had_reasoning = True
            return piece, ""
        if self._state == self._TYPED_REASONING:  # the first answer text: the typed reasoning is over
            self._state = self._CONTENT
            self._strip_leading = True
            if self._pending:  # blanks that came before the reasoning
                piece, self._pending = self._pending + piece, ""
        if self._state == self._CONTENT:
            if self._strip_leading:
                piece = piece.lstrip()
                if piece:
                    self._strip_leading = False
            return "", piece
        text = self._pending + piece if self._pending else piece
        self._pending = ""
        if self._state == self._START:
            stripped = text.lstrip()
            if not stripped:
                self._pending = text
                return "", ""
            if stripped.startswith(OPEN_TAG):
                self._state = self._REASONING
                self._had_reasoning = True
                return self._feed_reasoning(stripped[len(OPEN_TAG) :])
            if OPEN_TAG.startswith(stripped):
                self._pending = text
                return "", ""
            self._state = self._CONTENT
            return "", text
        return self._feed_reasoning(text)

    def _feed_reasoning(self, text: str) -> tuple[str, str]:
        if "<" not in text:
            return text, ""
        end = text.find(CLOSE_TAG)
        if end >= 0:
            self._state = self._CONTENT
            content = text[end + len(CLOSE_TAG) :].lstrip()
            self._strip_leading = not content
            return text[:end], content
        held = _held_back(text, CLOSE_TAG)
        if held:
            self._pending = text[-held:]
            return text[:-held], ""
        return text, ""

    def flush(self) -> tuple[str, str]:
        """Whatever was held back when the stream ends."""
        pending, self._pending = self._pending, ""
        if self._state == self._REASONING:
            return pending, ""
        return "", pending if self._state == self._CONTENT else pending.strip()
