"""Telling a model's thinking from its answer while the text streams in.

AutoGen's ``OpenAIChatCompletionClient`` (and Duet's :class:`OpenAICompatibleClient`, which keeps
the same contract) turns ``reasoning_content`` deltas into ordinary text pieces: the first one
prefixed with ``<think>``, then a separate ``</think>`` piece. Models served without a reasoning
parser (DeepSeek-R1 on older Ollama or vLLM) write the very same tags inline. One tag parser
therefore covers both.
"""

from __future__ import annotations

import re

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"

_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)\s*", re.DOTALL)


def strip_think_blocks(text: str) -> str:
    """Remove ``<think>…</think>`` blocks (Dify sends them back inside assistant content)."""
    if OPEN_TAG not in text:
        return text
    return _THINK_BLOCK.sub("", text).strip()


def _held_back(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that could be the start of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ThinkTagSplitter:
    """Splits streamed text into (reasoning, content) pairs.

    Only a ``<think>`` at the start of the output (after whitespace) opens reasoning, so an
    answer that merely mentions the tag is left alone. Tags split across pieces are held back
    until they are complete.

    >>> s = ThinkTagSplitter()
    >>> [s.feed(p) for p in ["<thi", "nk>plan", "</think>\\n\\nHi"]]
    [('', ''), ('plan', ''), ('', 'Hi')]
    """

    __slots__ = ("_state", "_pending", "_strip_leading", "_had_reasoning")

    _START, _REASONING, _CONTENT = 0, 1, 2

    def __init__(self) -> None:
        self._state = self._START
        self._pending = ""
        self._strip_leading = False
        self._had_reasoning = False

    @property
    def in_reasoning(self) -> bool:
        return self._state == self._REASONING

    @property
    def reasoning_finished(self) -> bool:
        """A reasoning block was opened and has been closed."""
        return self._had_reasoning and self._state == self._CONTENT

    def feed(self, piece: str) -> tuple[str, str]:
        """Returns the reasoning and the content in ``piece`` (reasoning always comes first)."""
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
        return "", pending.strip() if self._state == self._START else pending
