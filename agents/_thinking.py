"""Telling a model's thinking from its answer while the text streams in.

Thinking reaches an agent in one of three ways, and :class:`ReasoningSplitter` reads all three:

- Duet's :class:`~duet.agents.OpenAICompatibleClient` yields the upstream's ``reasoning_content``
  (or ``reasoning``) deltas as :class:`ReasoningText` pieces, already apart from the answer text:
  nothing to parse;
- AutoGen's ``OpenAIChatCompletionClient`` yields them as plain text, the first one prefixed with
  ``<think>``, then a separate ``</think>`` piece;
- models served without a reasoning parser (DeepSeek-R1 on older Ollama or vLLM) write the very
  same tags inline, in the answer text; or only the closing one: the DeepSeek-R1, QwQ and
  Qwen3-Thinking chat templates open ``<think>`` in the prompt, so the output is the thinking, a lone
  ``</think>``, then the answer.

The last two are told apart by one tag parser, which runs on plain text only. Text before a lone
``</think>`` can only be known for reasoning once the tag comes: a splitter made ``opened`` (the
model is known, or guessed from its name, to think this way: :func:`opens_thinking`) takes plain text
for reasoning from the start, and gives it back as the answer if the stream ends with no ``</think>``.
"""

from __future__ import annotations

import re
from typing import Any

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
THOUGHT_TAGS = ("<thought>", "</thought>")
"""Gemini's OpenAI-compatible endpoint wraps thought summaries (``include_thoughts``) in these."""

THINKING_TEMPLATES = re.compile(r"deepseek-r1|\br1\b|qwq|thinking|qwen3(?!.*(instruct|coder))", re.IGNORECASE)
"""Model names whose chat templates open ``<think>`` in the prompt (DeepSeek-R1 and its distills, QwQ,
Qwen3 and Qwen3-Thinking): served without a reasoning parser, they write a lone ``</think>``."""


def opens_thinking(client: Any) -> bool:
    """Whether ``client``'s model writes its thinking as plain text ended by a lone ``</think>``: as
    its client last saw (``thinks_in_content``), else as its name suggests (:data:`THINKING_TEMPLATES`).
    A client that is not Duet's (no ``thinks_in_content``) is taken to tag its thinking."""
    if not hasattr(client, "thinks_in_content"):
        return False
    seen = client.thinks_in_content
    return seen if seen is not None else bool(THINKING_TEMPLATES.search(str(getattr(client, "model", ""))))


def remember_thinking(client: Any, splitter: "ReasoningSplitter") -> None:
    """What a finished stream showed of how ``client``'s model writes its thinking, for its next calls."""
    if hasattr(client, "thinks_in_content") and splitter.showed is not None:
        client.thinks_in_content = splitter.showed

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
    until they are complete. A lone ``</think>`` in text that came with no reasoning ends reasoning
    too: the text before it in the same piece is reasoning (earlier pieces were given as answer text,
    unless the splitter is ``opened``: see the module). The answer after reasoning starts at its first
    non-blank character.

    >>> s = ReasoningSplitter()
    >>> [s.feed(p) for p in ["<thi", "nk>plan", "</think>\\n\\nHi"]]
    [('', ''), ('plan', ''), ('', 'Hi')]
    >>> s = ReasoningSplitter()
    >>> [s.feed(p) for p in [ReasoningText("plan"), "\\n\\nHi"]], s.reasoning_finished
    ([('plan', ''), ('', 'Hi')], True)
    >>> s = ReasoningSplitter(opened=True)
    >>> [s.feed(p) for p in ["plan", "</th", "ink>\\n\\nHi"]], s.reasoning_finished
    ([('plan', ''), ('', ''), ('', 'Hi')], True)
    """

    __slots__ = ("_state", "_pending", "_strip_leading", "_had_reasoning", "_opened", "_guessed", "showed", "_close", "_copy")

    # _REASONING: inside a <think> block of plain text; _TYPED_REASONING: ReasoningText pieces came.
    _START, _REASONING, _CONTENT, _TYPED_REASONING = 0, 1, 2, 3

    def __init__(self, opened: bool = False) -> None:
        self._state = self._START
        self._pending = ""
        self._strip_leading = False
        self._had_reasoning = False
        self._opened = opened
        self._close = CLOSE_TAG
        self._copy = False
        self._guessed: list[str] | None = None
        """Opened: the plain text taken for reasoning before any tag confirmed it."""
        self.showed: bool | None = None
        """What the stream showed: True, thinking ended by a lone ``</think>``; False, reasoning apart
        (typed) or, opened, an answer with no ``</think>``; None, nothing either way."""

    @property
    def reasoning_finished(self) -> bool:
        """Reasoning came, and the answer text after it has begun."""
        return self._had_reasoning and self._state == self._CONTENT

    def feed(self, piece: str) -> tuple[str, str]:
        """Returns the reasoning and the content in ``piece`` (reasoning always comes first)."""
        if piece.__class__ is ReasoningText:  # not isinstance: a third of the cost, on every piece
            return self._typed(piece), ""
        if self._state == self._TYPED_REASONING:  # the first answer text: the typed reasoning is over
            self._state = self._CONTENT
            self._strip_leading = True
            if self._pending:  # blanks that came before the reasoning
                piece, self._pending = self._pending + piece, ""
        if self._state == self._CONTENT:
            if not self._had_reasoning:  # a lone </think> may still come
                if self._pending:
                    piece, self._pending = self._pending + piece, ""
                if "<" in piece:
                    return self._lone_close(piece)
            if self._strip_leading:
                piece = piece.lstrip()
                if piece:
                    self._strip_leading = False
            return "", piece
        text = self._pending + piece if self._pending else piece
        self._pending = ""
        if self._state == self._START:
            return self._start(text)
        if self._copy:  # typed reasoning came inside the tags: the tagged text is its copy
            return "", self._feed_reasoning(text)[1]
        return self._feed_reasoning(text)

    def _typed(self, piece: str) -> str:
        """A :class:`ReasoningText` piece: reasoning, whatever the state. Inside ``<think>`` tags it makes
        the tagged text a copy (llama.cpp's ``deepseek-legacy`` sends the thinking both ways)."""
        if self._state == self._START:
            self._state = self._TYPED_REASONING
            self._had_reasoning = True
            self.showed = False
        elif self._state == self._REASONING:
            self._copy = True
        return piece

    def _start(self, text: str) -> tuple[str, str]:
        """The first text that is not blank: a ``<think>`` (or Gemini's ``<thought>``) opens reasoning;
        opened, any text does; else it is the answer."""
        stripped = text.lstrip()
        if not stripped:
            self._pending = text
            return "", ""
        opening = OPEN_TAG if stripped.startswith(OPEN_TAG) else THOUGHT_TAGS[0] if stripped.startswith(THOUGHT_TAGS[0]) else ""
        if opening:
            self._state = self._REASONING
            self._had_reasoning = True
            self._close = CLOSE_TAG if opening == OPEN_TAG else THOUGHT_TAGS[1]
            return self._feed_reasoning(stripped[len(opening) :])
        if OPEN_TAG.startswith(stripped) or THOUGHT_TAGS[0].startswith(stripped):
            self._pending = text
            return "", ""
        if self._opened:  # the prompt opened <think>: this is thinking until a </think> says so
            self._state = self._REASONING
            self._had_reasoning = True
            self._guessed = []
            return self._feed_reasoning(text)
        self._state = self._CONTENT
        return self._lone_close(text) if "<" in text else ("", text)

    def _lone_close(self, text: str) -> tuple[str, str]:
        """Answer text that holds a lone ``</think>`` (or the start of one, held back): what came
        before the tag in this piece was reasoning, the answer starts after it."""
        end = text.find(CLOSE_TAG)
        if end >= 0:
            self._had_reasoning = True
            self.showed = True
            content = text[end + len(CLOSE_TAG) :].lstrip()
            self._strip_leading = not content
            return text[:end], content
        held = _held_back(text, CLOSE_TAG)
        if held:
            self._pending = text[-held:]
            return "", text[:-held]
        return "", text

    def _feed_reasoning(self, text: str) -> tuple[str, str]:
        if "<" not in text:
            return self._guess(text), ""
        end = text.find(self._close)
        if end >= 0:
            self._state = self._CONTENT
            if self._guessed is not None:
                self._guessed = None
                self.showed = True
            content = text[end + len(self._close) :].lstrip()
            self._strip_leading = not content
            return text[:end], content
        held = _held_back(text, self._close)
        if held:
            self._pending = text[-held:]
            return self._guess(text[:-held]), ""
        return self._guess(text), ""

    def _guess(self, reasoning: str) -> str:
        if self._guessed is not None:
            self._guessed.append(reasoning)
        return reasoning

    @property
    def answer_was_reasoned(self) -> bool:
        """Opened, the stream ended with no ``</think>``: the text given as reasoning was the answer
        (:meth:`flush` gives it again, as the answer)."""
        return self._guessed is not None and self.showed is False

    def flush(self) -> tuple[str, str]:
        """Whatever was held back when the stream ends. Opened, with no ``</think>`` seen: all the text
        taken for reasoning, as the answer (:attr:`answer_was_reasoned`)."""
        pending, self._pending = self._pending, ""
        if self._state == self._REASONING:
            if self._guessed is not None:  # no </think> came: it was the answer
                answer = "".join(self._guessed) + pending
                self.showed = False
                return "", answer.strip()
            return pending, ""
        return "", pending if self._state == self._CONTENT else pending.strip()
