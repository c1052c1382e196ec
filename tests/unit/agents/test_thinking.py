"""Think tags: the reasoning splitter (``agents/_thinking.py``) and the stripping of whole think blocks."""

from __future__ import annotations

import pytest
from duet.agents._thinking import ReasoningSplitter, ReasoningText, strip_think_blocks


def split(pieces: list[str]) -> tuple[str, str]:
    splitter = ReasoningSplitter()
    reasoning, content = "", ""
    for piece in pieces:
        r, c = splitter.feed(piece)
        reasoning, content = reasoning + r, content + c
    r, c = splitter.flush()
    return reasoning + r, content + c


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["<think>", "a", "b", "</think>", "answer"], ("ab", "answer")),  # the stock client's markers
        (["<think>plan</think>\n\nHi"], ("plan", "Hi")),
        (["  <th", "ink>x</thi", "nk>", "\n\n", "y"], ("x", "y")),  # tags split anywhere
        (["Hello <think> is a tag"], ("", "Hello <think> is a tag")),  # not at the start: content
        (["<think>never closed"], ("never closed", "")),
        (["plain ", "text"], ("", "plain text")),
        (["<", "b>bold</b>"], ("", "<b>bold</b>")),
        (["<think>a < b </think>c"], ("a < b ", "c")),
        ([ReasoningText("a <"), ReasoningText("/think> b"), "\n\n", "c"], ("a </think> b", "c")),  # typed: nothing parsed
        (["\n", ReasoningText("r"), "c <think>"], ("r", "c <think>")),  # after typed reasoning, tags are text
        ([ReasoningText("never answered")], ("never answered", "")),
    ],
)
def test_reasoning_splitter(pieces: list[str], expected: tuple[str, str]) -> None:
    assert split(pieces) == expected


def test_strip_think_blocks() -> None:
    assert strip_think_blocks("<think>\nplan\n</think>\n\nAnswer") == "Answer"
    assert strip_think_blocks("<think>a</think>one<think>b</think>two") == "onetwo"
    assert strip_think_blocks("no tags") == "no tags"
