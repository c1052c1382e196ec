"""The answer agent's turn (``agents/_answer_agent.py``) through its AgentChat surface with a scripted
``ChatCompletionClient``: reasoning however it comes, the prompt, service tool rounds, a client tool
call ending the turn with a handoff."""

from __future__ import annotations

import json
from typing import Any

import pytest
from autogen_agentchat.messages import (
    HandoffMessage,
    MultiModalMessage,
    TextMessage,
    ToolCallRequestEvent,
)
from autogen_core import FunctionCall, Image
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import FunctionTool
from duet.agents import AnswerAgent
from duet.agents._answer_agent import REASONING_PREAMBLE, place_notes
from duet.agents.upstream import ANSWER_MODEL_INFO
from duet.workbenches import ProxyTool, PythonFunctionTool, model_safe_name
from PIL import Image as PILImage

from tests.agent_turns import (
    QUESTION,
    SAME_THINKING,
    ModelMessage,
    reasoning_of,
    run_turn,
    streamed,
)
from tests.scripted_model_client import (
    ScriptedModelClient,
    ScriptedTurn,
    calls_result,
    text_result,
)


@pytest.mark.parametrize("pieces", SAME_THINKING.values(), ids=SAME_THINKING.keys())
def test_answer_agent_reads_reasoning_however_it_comes(pieces: list[str]) -> None:
    client = ScriptedModelClient(ScriptedTurn(pieces, text_result("Draft answer", thought="Check the units.")))
    events, response = run_turn(AnswerAgent("answerer", client), QUESTION)
    assert streamed(events) == ("Check the units.", "Draft answer")
    assert isinstance(response.chat_message, TextMessage) and response.chat_message.content == "Draft answer"


@pytest.mark.parametrize("vision", [False, True])
def test_answer_prompt_merges_instructions_and_keeps_images_only_for_vision(vision: bool) -> None:
    image = Image.from_pil(PILImage.new("RGB", (2, 2)))
    question = MultiModalMessage(content=["What is on this picture?", image], source="user")
    client = ScriptedModelClient(ScriptedTurn(["A square."], text_result("A square.")),
                                 model_info={**ANSWER_MODEL_INFO, "vision": vision})
    agent = AnswerAgent("answerer", client, system_message="Be exact.")
    run_turn(agent, ModelMessage(message=SystemMessage(content="Answer in English."), source="app"), question,
             reasoning_of(question, "It is a dark square."))
    system, *rest = client.calls[0].messages
    # The reasoning follows the user turn it is about (the system message stays the same every turn: cacheable).
    assert system == SystemMessage(content="Be exact.\n\nAnswer in English.\n\n" + REASONING_PREAMBLE)
    note = "<reasoning>\nIt is a dark square.\n</reasoning>"
    assert len(rest) == 1 and isinstance(rest[0], UserMessage)
    if vision:
        assert rest[0].content == ["What is on this picture?", image, note]
    else:
        assert rest[0].content == "What is on this picture?\n[image omitted]\n\n" + note


async def lookup_order(order_id: str) -> str:
    """Finds an order."""
    return f"order {order_id} shipped"


@pytest.mark.parametrize("service_tool", [FunctionTool(lookup_order, description="Finds an order."), PythonFunctionTool(lookup_order)],
                         ids=["FunctionTool", "PythonFunctionTool"])
def test_service_tool_round_then_text_answer(service_tool: Any) -> None:
    client = ScriptedModelClient(
        ScriptedTurn(["Let me look."], calls_result(("lookup_order", '{"order_id": "A7"}'), thought="Let me look.")),
        ScriptedTurn(["It shipped."], text_result("It shipped.")),
    )
    events, response = run_turn(AnswerAgent("answerer", client, tools=[service_tool]), QUESTION)
    first, second = client.calls
    assert [t["name"] for t in first.tools] == [t["name"] for t in second.tools] == ["lookup_order"]
    *_, asked, results = second.messages
    assert isinstance(asked, AssistantMessage) and asked.thought == "Let me look."
    assert isinstance(results, FunctionExecutionResultMessage)
    assert results.content == [FunctionExecutionResult(content="order A7 shipped", call_id=asked.content[0].id, name="lookup_order", is_error=False)]  # type: ignore[union-attr]
    reasoning, text = streamed(events)
    assert "[calling lookup_order" in reasoning and "[lookup_order returned]" in reasoning
    assert text == "Let me look.\n\nIt shipped."
    assert isinstance(response.chat_message, TextMessage) and response.chat_message.content == "It shipped."
    assert response.chat_message.models_usage is not None and response.chat_message.models_usage.prompt_tokens == 20


def test_out_of_tool_rounds_only_client_tools_are_offered_and_service_calls_are_not_run() -> None:
    runs: list[str] = []

    def count(what: str) -> str:
        """Counts."""
        runs.append(what)
        return "counted"

    client_tool = ProxyTool("kb.lookup", "Looks up.", {"type": "object", "properties": {"query": {"type": "string"}}})
    client = ScriptedModelClient(
        ScriptedTurn([], calls_result(("count", '{"what": "a"}'))),
        ScriptedTurn(["Enough counting."], calls_result(("count", '{"what": "b"}'), thought="Enough counting.")),
    )
    agent = AnswerAgent("answerer", client, tools=[FunctionTool(count, description="Counts."), client_tool], max_tool_rounds=1)
    _, response = run_turn(agent, QUESTION)
    assert runs == ["a"]
    assert [t["name"] for t in client.calls[0].tools] == ["count", model_safe_name("kb.lookup")]
    assert [t["name"] for t in client.calls[1].tools] == [model_safe_name("kb.lookup")]  # the last round: client tools only
    assert isinstance(response.chat_message, TextMessage) and response.chat_message.content == "Enough counting."


def test_client_tool_call_ends_the_turn_with_a_handoff() -> None:
    client_tool = ProxyTool("kb.lookup", "Looks up.", {"type": "object", "properties": {"query": {"type": "string"}}})
    alias = model_safe_name("kb.lookup")
    client = ScriptedModelClient(
        ScriptedTurn(["Checking."], calls_result((alias, '{"query": "duet"}'), ("lookup_order", '{"order_id": "B2"}'), thought="Checking.")),
    )
    agent = AnswerAgent("answerer", client, tools=[client_tool, FunctionTool(lookup_order, description="Finds an order.")])
    events, response = run_turn(agent, QUESTION)
    assert len(client.calls) == 1  # no second round: the client runs its tool
    handoff = response.chat_message
    assert isinstance(handoff, HandoffMessage) and handoff.target == "client"
    requested = [e for e in events if isinstance(e, ToolCallRequestEvent)]
    assert [(c.name, json.loads(c.arguments)) for e in requested for c in e.content] == [("kb.lookup", {"query": "duet"})]
    asked, results = handoff.context  # the round as the model made it, with the service tool's result run here
    assert isinstance(asked, AssistantMessage) and [c.name for c in asked.content] == [alias, "lookup_order"]  # type: ignore[union-attr]
    assert isinstance(results, FunctionExecutionResultMessage) and [r.content for r in results.content] == ["order B2 shipped"]
    assert requested[0].content[0].id == asked.content[0].id  # type: ignore[union-attr]


def test_notes_after_tool_results_are_placed_from_the_end() -> None:
    """A note of tool results (a reasoner that thought again) follows them as a user message; the
    user turn's note stays in its message; this run's new reasoning follows the last results."""
    def results(call_id: str) -> FunctionExecutionResultMessage:
        return FunctionExecutionResultMessage(content=[FunctionExecutionResult(content="ok", call_id=call_id, name="f")])

    def calls(call_id: str) -> AssistantMessage:
        return AssistantMessage(content=[FunctionCall(id=call_id, name="f", arguments="{}")], source="a")

    body = [UserMessage(content="Q", source="user"), calls("1"), results("1"), calls("2"), results("2")]
    notes = {1: ("Plan.", ""), 3: ("After one.", "")}  # by index in a conversation with one system message first
    assert place_notes(body, 1, "Plan.\n\nAfter two.", "", notes)
    assert [type(m).__name__ for m in body] == ["UserMessage", "AssistantMessage", "FunctionExecutionResultMessage", "UserMessage",
                                                "AssistantMessage", "FunctionExecutionResultMessage", "UserMessage"]
    assert body[0].content == "Q\n\n<reasoning>\nPlan.\n</reasoning>"
    assert body[3].content == "<reasoning>\nAfter one.\n</reasoning>"
    assert body[6].content == "<reasoning>\nAfter two.\n</reasoning>"

    # A round's follow-up whose turn has no note (its round was not restored: ids Duet did not issue):
    # the reasoning about the turn goes in the turn, and the results stay last (Mistral refuses a user
    # message after tool results).
    body = [UserMessage(content="Q", source="user"), calls("9"), results("9")]
    assert place_notes(body, 1, "Fresh.", "", {})
    assert [type(m).__name__ for m in body] == ["UserMessage", "AssistantMessage", "FunctionExecutionResultMessage"]
    assert body[0].content == "Q\n\n<reasoning>\nFresh.\n</reasoning>"
