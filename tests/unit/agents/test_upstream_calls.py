"""The tool calls an upstream issued, sent back to it as it made them (issue 25)."""

from __future__ import annotations


from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage, UserMessage

from duet.agents._upstream_calls import IssuedCall, UpstreamCall, issue, issued_in, to_upstream
from duet.agents.upstream._transform import messages_to_openai


def test_the_upstream_gets_back_its_ids_and_fields() -> None:
    issued: dict[str, IssuedCall] = {}
    upstream_calls = [UpstreamCall(id="a1B2c3D4e", name="f", arguments="{}", extra={"extra_content": {"google": {"s": 1}}}),
                      FunctionCall(id="Z9y8X7w6v", name="f", arguments="{}")]
    calls = issue(upstream_calls, issued)
    assert all(call.id.startswith("call_") for call in calls)
    results = FunctionExecutionResultMessage(content=[FunctionExecutionResult(content="ok", call_id=c.id, name="f") for c in calls])
    history = [UserMessage(content="Hi", source="user"), AssistantMessage(content=calls, source="a"), results]
    wire = messages_to_openai(to_upstream(history, issued))
    assert [c["id"] for c in wire[1]["tool_calls"]] == ["a1B2c3D4e", "Z9y8X7w6v"]
    assert wire[1]["tool_calls"][0]["extra_content"] == {"google": {"s": 1}} and "extra_content" not in wire[1]["tool_calls"][1]
    assert [m["tool_call_id"] for m in wire[2:]] == ["a1B2c3D4e", "Z9y8X7w6v"]
    assert issued_in(history, issued) == issued and history[1].content == calls  # the history itself is unchanged


def test_ids_that_cannot_be_sent_back_are_not_kept() -> None:
    issued: dict[str, IssuedCall] = {}
    issue([FunctionCall(id="", name="f", arguments="{}"), FunctionCall(id="x", name="f", arguments="{}"),
           FunctionCall(id="x", name="g", arguments="{}")], issued)
    assert issued == {}
