"""The driver<->agent messages (``agents/_messages.py``): built and read back in one module, valid
AgentChat messages, read the AgentChat way from outside Duet."""

from __future__ import annotations

from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import (
    HandoffMessage,
    ModelClientStreamingChunkEvent,
    StopMessage,
    TextMessage,
    ToolCallRequestEvent,
)
from autogen_core.models import (
    AssistantMessage,
    RequestUsage,
)
from duet.agents import (
    ANSWERER_NAME,
    REASONER_NAME,
    ContentDelta,
    ReasoningDelta,
    ToolCall,
    ToolCallsRequested,
    Usage,
)
from duet.agents._messages import (
    AnswerReply,
    ClientHandoff,
    FailureReply,
    ReasoningReply,
    answer_reply,
    as_agentchat_event,
    carries_task,
    client_handoff,
    failure_reply,
    read_reply,
    read_task,
    reasoning_reply,
    task_messages,
)
from duet.agents._names import CLIENT

from tests.core_parts import CONVERSATION, calls, results


def test_task_is_read_back_with_its_reasoning() -> None:
    task = task_messages(list(CONVERSATION), earlier_reasoning="Look it up.")
    assert carries_task(task) and read_task(task) == (CONVERSATION, "Look it up.")
    handoff = task[0]
    assert isinstance(handoff, HandoffMessage) and handoff.source == CLIENT and handoff.content == "Weather in Paris?"
    # A reasoner's reply that follows is reasoning too (the answer agent's view), never conversation.
    assert read_task([*task, reasoning_reply(REASONER_NAME, "Call the tool.")]) == (CONVERSATION, "Look it up.\n\nCall the tool.")
    assert len(task_messages(list(CONVERSATION))) == 1  # no earlier reasoning: the handoff alone
    tools_only = [*CONVERSATION, AssistantMessage(content=calls("f"), source="assistant"), results("f")]
    assert task_messages(tools_only)[0].content == "Weather in Paris?"  # the last user text names the task
    assert task_messages([results("f")])[0].content == "(continue)"
    first, second = task_messages(list(CONVERSATION))[0], task_messages(tools_only)[0]
    # Every task's handoff is given the same fields: one set of them serves all (not 728 bytes each).
    assert first.model_fields_set is second.model_fields_set and "context" in first.model_fields_set
    replies = [reasoning_reply(REASONER_NAME, "Think."), reasoning_reply(REASONER_NAME, "Again.")]
    assert replies[0].model_fields_set is replies[1].model_fields_set and "models_usage" in replies[0].model_fields_set


def test_every_reply_is_read_back_by_the_driver() -> None:
    usage = RequestUsage(prompt_tokens=3, completion_tokens=4)
    turn = [AssistantMessage(content=calls("lookup", "notify"), source=ANSWERER_NAME), results("lookup")]
    assert read_reply(reasoning_reply(REASONER_NAME, "plan", usage)) == ReasoningReply("plan")
    assert read_reply(reasoning_reply(REASONER_NAME, "")) == ReasoningReply("")
    for reason in ("stop", "length", "content_filter"):
        assert read_reply(answer_reply(ANSWERER_NAME, "Sunny.", reason, usage)) == AnswerReply("Sunny.", reason)  # type: ignore[arg-type]
    handoff = client_handoff(ANSWERER_NAME, calls("notify"), turn, usage)
    reply = read_reply(handoff)
    assert isinstance(reply, ClientHandoff) and reply.turn is turn  # the hidden turn, not a copy
    assert handoff.target == CLIENT and handoff.models_usage == usage and "notify" in handoff.content
    failure = failure_reply(REASONER_NAME, RuntimeError("model down"))
    assert read_reply(failure) == FailureReply("reasoner failed: model down")
    assert failure.target == CLIENT  # a handoff to the client: what ends every Duet team


def test_built_messages_are_valid_agentchat_messages() -> None:
    """What AutoGen Studio stores and shows: each message survives its own JSON round trip
    (including those built with ``model_construct``) and reads back the same."""
    usage = RequestUsage(prompt_tokens=1, completion_tokens=2)
    built = [
        *task_messages(list(CONVERSATION), "earlier"),
        reasoning_reply(REASONER_NAME, "plan", usage),
        answer_reply(ANSWERER_NAME, "Sunny.", "stop", usage),
        client_handoff(ANSWERER_NAME, calls("notify"), [AssistantMessage(content=calls("notify"), source=ANSWERER_NAME), results()], usage),
        failure_reply(ANSWERER_NAME, ValueError("bad")),
    ]
    for message in built:
        again = type(message).model_validate_json(message.model_dump_json())
        assert again.model_dump() == message.model_dump()
        assert read_reply(again) == read_reply(message)
    assert read_task(built[:2]) == (CONVERSATION, "earlier")


def test_a_client_handoff_is_what_model_construct_builds() -> None:
    """The client handoff is built without ``model_construct``'s walk over the fields: the same message
    (fields, given fields, no extra, no private attributes), its given fields one set for every handoff."""
    usage = RequestUsage(prompt_tokens=1, completion_tokens=2)
    turn = [AssistantMessage(content=calls("notify"), source=ANSWERER_NAME), results()]
    built, again = client_handoff(ANSWERER_NAME, calls("notify"), turn, usage), client_handoff(ANSWERER_NAME, calls("f"), [], usage)
    constructed = HandoffMessage.model_construct(
        id=built.id, created_at=built.created_at, metadata={}, models_usage=usage, source=ANSWERER_NAME, target=CLIENT,
        content=f"{ANSWERER_NAME} asks the client to run notify.", context=turn)
    assert built.__dict__ == constructed.__dict__ and list(built.__dict__) == list(constructed.__dict__)
    assert built.model_fields_set == constructed.model_fields_set and built.model_fields_set is again.model_fields_set
    assert (built.__pydantic_extra__, built.__pydantic_private__) == (constructed.__pydantic_extra__, constructed.__pydantic_private__)
    assert built.metadata is not again.metadata and built.id != again.id


def test_messages_from_outside_duet_are_read_the_agentchat_way() -> None:
    typed = TextMessage(source="user", content="What is Duet?")
    other_agent = TextMessage(source="critic", content="Be precise.")
    assert not carries_task([typed, other_agent])
    conversation, reasoning = read_task([typed, other_agent])
    assert reasoning == "" and [(m.content, m.source) for m in conversation] == [("What is Duet?", "user"), ("Be precise.", "critic")]
    # Not Duet's replies: the driver ignores them...
    for message in (typed, StopMessage(source="x", content="stop"), TaskResult(messages=[]),
                    ModelClientStreamingChunkEvent(source="answerer", content="piece")):
        assert read_reply(message) is None
    # ...but a stock agent's handoff to the client still hands its context over, and a finish
    # reason the protocol does not know reads as "stop".
    stock = HandoffMessage(source="assistant", target=CLIENT, content="over to you", context=[results("f")])
    assert read_reply(stock) == ClientHandoff([results("f")])
    odd = TextMessage(source=ANSWERER_NAME, content="x", metadata={"finish_reason": "tool_use"})
    assert read_reply(odd) == AnswerReply("x", "stop")


def test_events_outside_a_run_are_stock_agentchat_events() -> None:
    thinking = as_agentchat_event(ReasoningDelta(text="hm", source=REASONER_NAME), REASONER_NAME)
    text = as_agentchat_event(ContentDelta(text="Hi"), ANSWERER_NAME)
    asked = as_agentchat_event(ToolCallsRequested(calls=[ToolCall(id="c1", name="kb.lookup", arguments="{}")]), ANSWERER_NAME)
    assert isinstance(thinking, ModelClientStreamingChunkEvent) and thinking.metadata and thinking.content == "hm"
    assert isinstance(text, ModelClientStreamingChunkEvent) and not text.metadata and text.content == "Hi"
    assert isinstance(asked, ToolCallRequestEvent) and asked.content[0].name == "kb.lookup"
    assert as_agentchat_event(Usage(source="a", prompt_tokens=1, completion_tokens=1), "a") is None
