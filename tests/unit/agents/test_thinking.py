"""Think tags: the reasoning splitter (``agents/_thinking.py``) and the stripping of whole think blocks."""

from __future__ import annotations

import pytest
from duet.agents._thinking import ReasoningSplitter, ReasoningText, opens_thinking, remember_thinking, strip_think_blocks


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


# -- a thinking model served without a reasoning parser (issue 25) -----------------------------------
def split_pieces(pieces: list[str], opened: bool = False) -> tuple[str, str, ReasoningSplitter]:
    splitter = ReasoningSplitter(opened)
    reasoning, content = "", ""
    for piece in pieces:
        r, c = splitter.feed(piece)
        reasoning, content = reasoning + r, content + c
    r, c = splitter.flush()
    if splitter.answer_was_reasoned:
        reasoning = ""
    return reasoning + r, content + c, splitter


@pytest.mark.parametrize("pieces", [["I think", " so.</think>\n\nParis"], ["I think so.</th", "ink>", "\n\nParis"]])
def test_a_lone_close_tag_ends_the_reasoning(pieces: list[str]) -> None:
    reasoning, content, splitter = split_pieces(pieces, opened=True)
    assert (reasoning, content, splitter.reasoning_finished, splitter.showed) == ("I think so.", "Paris", True, True)


def test_a_lone_close_tag_unopened_keeps_what_came_before_in_the_same_piece() -> None:
    reasoning, content, splitter = split_pieces(["so.</think>\n\nParis"])
    assert (reasoning, content, splitter.reasoning_finished) == ("so.", "Paris", True)


def test_opened_without_a_close_tag_gives_the_text_back_as_the_answer() -> None:
    reasoning, content, splitter = split_pieces(["Paris is ", "sunny."], opened=True)
    assert (reasoning, content, splitter.answer_was_reasoned, splitter.showed) == ("", "Paris is sunny.", True, False)


def test_llama_cpp_legacy_copy_is_read_once() -> None:
    pieces = ["<think>", ReasoningText("plan"), "plan", ReasoningText(" more"), " more", "</think>", "Hi"]
    assert split_pieces(pieces)[:2] == ("plan more", "Hi")


def test_gemini_thought_summaries() -> None:
    assert split_pieces(["<thou", "ght>plan", "</thought>", "Hi"])[:2] == ("plan", "Hi")


def test_the_guess_and_what_a_client_learns() -> None:
    class Client:
        def __init__(self, model: str) -> None:
            self.model, self.thinks_in_content = model, None

    assert opens_thinking(Client("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")) and opens_thinking(Client("Qwen/Qwen3-8B"))
    assert not opens_thinking(Client("Qwen/Qwen3-Coder-30B")) and not opens_thinking(Client("llama3.1"))
    assert not opens_thinking(object())  # not Duet's client: tagged thinking only
    client = Client("llama3.1")
    remember_thinking(client, split_pieces(["x</think>y"])[2])
    assert client.thinks_in_content is True and opens_thinking(client)
