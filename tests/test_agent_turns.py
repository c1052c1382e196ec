"""The two agents' turns, driven through their AgentChat surface (``on_messages_stream``) outside a
Duet request, with a scripted ``ChatCompletionClient``: unit tests, no sockets."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Sequence

import pytest
from autogen_agentchat.base import Response
from autogen_agentchat.messages import (
    BaseAgentEvent,
    BaseChatMessage,
    HandoffMessage,
    ModelClientStreamingChunkEvent,
    MultiModalMessage,
    TextMessage,
    ToolCallRequestEvent,
)
from autogen_core import CancellationToken, Image
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient
from PIL import Image as PILImage

from duet.agents.upstream import ANSWER_MODEL_INFO, ReasoningText
from duet.agents import AnswerAgent, OpenAICompatibleClient, ReasoningAgent
from duet.agents._answer_agent import REASONING_PREAMBLE
from duet.agents._messages import reasoning_reply
from duet.agents.upstream import streaming_create_args
from duet.workbenches import ProxyTool, PythonFunctionTool, model_safe_name
from tests.scripted_model_client import ScriptedModelClient, ScriptedTurn, calls_result, text_result

R = ReasoningText
QUESTION = TextMessage(content="Is 5 km more than 3 miles?", source="user")


class ModelMessage(BaseChatMessage):
    """An AgentChat message carrying one model message as it is (client instructions, tool results):
    what an app that keeps its history at the model level hands an agent."""

    message: LLMMessage

    def to_text(self) -> str:
        return str(self.message.content)

    def to_model_text(self) -> str:
        return self.to_text()

    def to_model_message(self) -> Any:
        return self.message


async def _run(agent: ReasoningAgent | AnswerAgent, messages: Sequence[BaseChatMessage]) -> tuple[list[BaseAgentEvent], Response]:
    events: list[BaseAgentEvent] = []
    response: Response | None = None
    async for item in agent.on_messages_stream(list(messages), CancellationToken()):
        if isinstance(item, Response):
            response = item
        else:
            events.append(item)  # type: ignore[arg-type]
    assert response is not None
    return events, response


def run_turn(agent: ReasoningAgent | AnswerAgent, *messages: BaseChatMessage) -> tuple[list[BaseAgentEvent], Response]:
    """The agent's events and its final response for one turn."""
    return asyncio.run(_run(agent, messages))


def is_reasoning(event: BaseAgentEvent) -> bool:
    return isinstance(event, ModelClientStreamingChunkEvent) and event.metadata.get("duet") == "reasoning"


def streamed(events: Sequence[BaseAgentEvent]) -> tuple[str, str]:
    """The reasoning and the answer text the agent streamed."""
    chunks = [e for e in events if isinstance(e, ModelClientStreamingChunkEvent)]
    return "".join(e.content for e in chunks if is_reasoning(e)), "".join(e.content for e in chunks if not is_reasoning(e))


def reasoning_of(question: BaseChatMessage, reasoning: str) -> BaseChatMessage:
    """The reasoning agent's reply with ``reasoning``, as the answer agent receives it in a team."""
    reasoner = ReasoningAgent("reasoner", ScriptedModelClient(ScriptedTurn([R(reasoning)], text_result(""))))
    return run_turn(reasoner, question)[1].chat_message


# The same thinking and draft, as each kind of client or upstream streams them.
SAME_THINKING = {
    "typed pieces (Duet's client)": [R("Check "), R("the units."), "\n\nDraft", " answer"],
    "inline tags (R1 without a reasoning parser)": ["<think>Check ", "the units.</think>\n\nDraft", " answer"],
    "tag pieces (AutoGen's stock client)": ["<think>Check ", "the units.", "</think>", "\n\nDraft", " answer"],
}


@pytest.mark.parametrize("pieces", SAME_THINKING.values(), ids=SAME_THINKING.keys())
def test_reasoning_agent_reads_reasoning_however_it_comes(pieces: list[str]) -> None:
    client = ScriptedModelClient(ScriptedTurn(pieces, text_result("Draft answer", thought="Check the units.")))
    events, response = run_turn(ReasoningAgent("reasoner", client), QUESTION)
    assert isinstance(response.chat_message, TextMessage) and response.chat_message.content == "Check the units."
    assert streamed(events) == ("Check the units.", "")


@pytest.mark.parametrize("pieces", SAME_THINKING.values(), ids=SAME_THINKING.keys())
def test_answer_agent_reads_reasoning_however_it_comes(pieces: list[str]) -> None:
    client = ScriptedModelClient(ScriptedTurn(pieces, text_result("Draft answer", thought="Check the units.")))
    events, response = run_turn(AnswerAgent("answerer", client), QUESTION)
    assert streamed(events) == ("Check the units.", "Draft answer")
    assert isinstance(response.chat_message, TextMessage) and response.chat_message.content == "Draft answer"


@pytest.mark.parametrize("pieces", [SAME_THINKING["typed pieces (Duet's client)"], SAME_THINKING["inline tags (R1 without a reasoning parser)"]],
                         ids=["typed", "inline"])
@pytest.mark.parametrize("stop_after_thinking", [True, False])
def test_stop_after_thinking_closes_the_call_when_the_draft_begins(pieces: list[str], stop_after_thinking: bool) -> None:
    client = ScriptedModelClient(ScriptedTurn(pieces, text_result("Draft answer", usage=(40, 9))))
    _, response = run_turn(ReasoningAgent("reasoner", client, stop_after_thinking=stop_after_thinking), QUESTION)
    call = client.calls[0]
    if stop_after_thinking:
        assert response.chat_message.content == "Check the units."  # type: ignore[union-attr]
        assert call.closed_early and call.pieces_taken == len(pieces) - 1  # closed at the draft's first piece
        assert response.chat_message.models_usage.completion_tokens != 9  # type: ignore[union-attr]  # estimated: no result came
    else:
        assert response.chat_message.content == "Check the units.Draft answer"  # type: ignore[union-attr]
        assert not call.closed_early and response.chat_message.models_usage.completion_tokens == 9  # type: ignore[union-attr]


def test_reasoning_is_cut_at_max_reasoning_chars() -> None:
    client = ScriptedModelClient(ScriptedTurn([R("0123456"), R("789abc"), R("never read")], text_result("")))
    events, response = run_turn(ReasoningAgent("reasoner", client, max_reasoning_chars=10), QUESTION)
    note = "\n\n[reasoning cut off at 10 characters]"
    assert streamed(events) == ("0123456789" + note, "")
    assert response.chat_message.content == "0123456789" + note  # type: ignore[union-attr]
    assert client.calls[0].closed_early and client.calls[0].pieces_taken == 2


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
    assert len(rest) == 1 and isinstance(rest[0], UserMessage)
    note = "<reasoning>\nIt is a dark square.\n</reasoning>"
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


@pytest.mark.parametrize(("reason_on_tool_results", "restored", "thinks"), [
    (False, False, False), (True, True, True), ("auto", False, True), ("auto", True, False),
])
def test_reasoning_on_tool_results(reason_on_tool_results: bool | str, restored: bool, thinks: bool) -> None:
    """``auto`` thinks again only when the task carries no restored reasoning for the round."""
    results = FunctionExecutionResultMessage(content=[FunctionExecutionResult(content="42", call_id="c1", name="f", is_error=False)])
    client = ScriptedModelClient(ScriptedTurn([R("The tool said 42.")], text_result("")))
    agent = ReasoningAgent("reasoner", client, reason_on_tool_results=reason_on_tool_results)  # type: ignore[arg-type]
    earlier = [reasoning_reply("reasoner", "Call f.")] if restored else []
    _, response = run_turn(agent, QUESTION, ModelMessage(message=results, source="app"), *earlier)
    if thinks:
        assert len(client.calls) == 1 and response.chat_message.content == "The tool said 42."  # type: ignore[union-attr]
    else:
        assert client.calls == [] and response.chat_message.content == ""  # type: ignore[union-attr]


def test_usage_is_asked_only_of_clients_that_need_asking() -> None:
    """AutoGen's OpenAI client streams no usage unless asked; Duet's own always asks; another
    client may reject OpenAI's field, so it gets the arguments as they are."""
    stock = OpenAIChatCompletionClient(model="m", base_url="http://127.0.0.1:1/v1", api_key="none", model_info=ANSWER_MODEL_INFO)
    assert streaming_create_args(stock, {"temperature": 0}) == {"temperature": 0, "stream_options": {"include_usage": True}}
    lean = OpenAICompatibleClient("m", "http://127.0.0.1:1/v1")
    assert streaming_create_args(lean, {"temperature": 0}) == {"temperature": 0}

    reasoner_client = ScriptedModelClient(ScriptedTurn([R("plan")], text_result("")))
    answer_client = ScriptedModelClient(ScriptedTurn(["Hi"], text_result("Hi")))
    reasoning = run_turn(ReasoningAgent("reasoner", reasoner_client), QUESTION)[1].chat_message
    run_turn(AnswerAgent("answerer", answer_client), QUESTION, reasoning)
    assert reasoner_client.calls[0].extra_create_args == answer_client.calls[0].extra_create_args == {}
