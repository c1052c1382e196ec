"""The reasoning agent's turn (``agents/_reasoning_agent.py``) through its AgentChat surface with a
scripted ``ChatCompletionClient``: reasoning however it comes, closed when the draft begins, cut at
``max_reasoning_chars``, thought again on tool results when asked."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, AsyncGenerator, Mapping

import pytest
from autogen_agentchat.messages import (
    TextMessage,
)
from autogen_core import CancellationToken
from autogen_core.models import (
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
)
from duet.agents import ReasoningAgent
from duet.agents._events import ReasoningDelta
from duet.agents._messages import reasoning_reply
from duet.agents.upstream import STREAMED_TEXT_UNKEPT_ARG, OpenAICompatibleClient

from tests.agent_turns import (
    QUESTION,
    SAME_THINKING,
    ModelMessage,
    R,
    run_turn,
    streamed,
)
from tests.scripted_model_client import ScriptedModelClient, ScriptedTurn, text_result
from tests.scripted_upstream import Reply, ScriptedUpstream


@pytest.mark.parametrize("pieces", SAME_THINKING.values(), ids=SAME_THINKING.keys())
def test_reasoning_agent_reads_reasoning_however_it_comes(pieces: list[str]) -> None:
    client = ScriptedModelClient(ScriptedTurn(pieces, text_result("Draft answer", thought="Check the units.")))
    events, response = run_turn(ReasoningAgent("reasoner", client), QUESTION)
    assert isinstance(response.chat_message, TextMessage) and response.chat_message.content == "Check the units."
    assert streamed(events) == ("Check the units.", "")


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


class _ArgumentsKept(OpenAICompatibleClient):
    """Duet's client, keeping the ``extra_create_args`` of each call."""

    arguments: list[Mapping[str, Any]]

    def create_stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[str | CreateResult, None]:
        self.__dict__.setdefault("arguments", []).append(dict(kwargs.get("extra_create_args", {})))
        return super().create_stream(*args, **kwargs)


def test_the_reasoning_is_kept_once_while_it_streams() -> None:
    """Duet's own client is told the agent keeps the reasoning (its result then holds no second copy);
    the reply holds it all, and the argument never reaches the upstream. Another client is not told."""
    with ScriptedUpstream() as upstream:
        upstream.script("r", Reply(reasoning=["Check ", "the units."], content=["Draft"]))
        duets_client = _ArgumentsKept("r", upstream.base_url)
        events, response = run_turn(ReasoningAgent("reasoner", duets_client), QUESTION)
        asyncio.run(duets_client.close())
        assert response.chat_message.content == "Check the units." and streamed(events) == ("Check the units.", "")  # type: ignore[union-attr]
        assert STREAMED_TEXT_UNKEPT_ARG in duets_client.arguments[0] and STREAMED_TEXT_UNKEPT_ARG not in upstream.requests[-1].body
    client = ScriptedModelClient(ScriptedTurn(SAME_THINKING["typed pieces (Duet's client)"], text_result("Draft answer")))
    run_turn(ReasoningAgent("reasoner", client), QUESTION)
    assert STREAMED_TEXT_UNKEPT_ARG not in client.calls[0].extra_create_args


class _PausedAfterEachPiece(ScriptedModelClient):
    """A scripted model that waits for ``go`` after each piece it streams (``waiting`` is set meanwhile)."""

    def __init__(self, *turns: ScriptedTurn) -> None:
        super().__init__(*turns)
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()

    async def create_stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[str | CreateResult, None]:  # type: ignore[override]
        async for item in super().create_stream(*args, **kwargs):
            yield item
            self.waiting.set()
            await self.go.wait()


def test_a_reasoning_event_handed_on_is_not_kept_while_the_next_piece_is_awaited() -> None:
    """An open stream keeps none of the events its reasoner has handed on (memory per open stream):
    while the model's next piece is awaited, nothing in the turn refers to the last one."""

    async def main() -> None:
        client = _PausedAfterEachPiece(ScriptedTurn([R("Check "), R("the units.")], text_result("")))
        turn = ReasoningAgent("reasoner", client)._turn([QUESTION], None, CancellationToken())
        first = await asyncio.wait_for(anext(turn), 5)
        assert isinstance(first, ReasoningDelta) and first.text == "Check "
        handed_on = weakref.ref(first)
        del first
        following = asyncio.ensure_future(anext(turn))
        await asyncio.wait_for(client.waiting.wait(), 5)  # the turn awaits the model's next piece
        assert not following.done() and handed_on() is None
        client.go.set()
        assert isinstance(await asyncio.wait_for(following, 5), ReasoningDelta)
        await turn.aclose()

    asyncio.run(main())


def test_reasoning_is_cut_at_max_reasoning_chars() -> None:
    client = ScriptedModelClient(ScriptedTurn([R("0123456"), R("789abc"), R("never read")], text_result("")))
    events, response = run_turn(ReasoningAgent("reasoner", client, max_reasoning_chars=10), QUESTION)
    note = "\n\n[reasoning cut off at 10 characters]"
    assert streamed(events) == ("0123456789" + note, "")
    assert response.chat_message.content == "0123456789" + note  # type: ignore[union-attr]
    assert client.calls[0].closed_early and client.calls[0].pieces_taken == 2


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
