"""Tool rounds (``agents/continuations/_rounds.py``): the rounds since the last user message, and splicing
a round's hidden part back."""

from __future__ import annotations

from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResultMessage,
    UserMessage,
)
from duet.agents.continuations import Continuation, splice, tool_rounds

from tests.core_parts import CONVERSATION, calls, results


def test_tool_rounds_since_the_last_user_message() -> None:
    round_one = [AssistantMessage(content=calls("a"), source="assistant"), results("a")]
    round_two = [AssistantMessage(content="thinking aloud", source="assistant"), AssistantMessage(content=calls("b"), source="assistant"), results("b")]
    assert tool_rounds([*CONVERSATION, *round_one, *round_two]) == [2, 5]
    assert tool_rounds([*round_one, UserMessage(content="next", source="user"), *round_two]) == [4]
    assert tool_rounds(CONVERSATION) == []


def test_splice_puts_the_hidden_part_of_a_round_back() -> None:
    """The client saw only its call (``notify``); the stored turn holds an earlier service-only round
    and the round's full calls with the service result. Results merge in call order."""
    earlier = [AssistantMessage(content=calls("search"), source="answerer"), results("search", content="found")]
    full_calls = AssistantMessage(content=calls("notify", "lookup"), thought="Checking.", source="answerer")
    stored = Continuation(turn=[*earlier, full_calls, results("lookup", content="service")], reasoning="plan")
    seen = [*CONVERSATION, AssistantMessage(content=calls("notify"), source="assistant"), results("notify", content="client"),
            UserMessage(content="thanks", source="user")]
    spliced = splice(seen, 2, stored)
    assert spliced[:2] == CONVERSATION and spliced[2:4] == earlier and spliced[4] is full_calls
    merged = spliced[5]
    assert isinstance(merged, FunctionExecutionResultMessage)
    assert [(r.name, r.content) for r in merged.content] == [("notify", "client notify"), ("lookup", "service lookup")]
    assert spliced[6:] == seen[4:]
    # The follow-up may end at the calls (no results yet): the stored results stand alone.
    assert [r.name for r in splice(seen[:3], 2, stored)[5].content] == ["lookup"]  # type: ignore[union-attr]


def test_splice_leaves_the_conversation_alone_without_a_usable_turn() -> None:
    seen = [*CONVERSATION, AssistantMessage(content=calls("notify"), source="assistant"), results("notify")]
    assert splice(seen, 2, Continuation()) is seen
    assert splice(seen, 2, Continuation(turn=[results("x"), AssistantMessage(content=calls("x"), source="a")])) is seen
