"""One agent's turn driven through its AgentChat surface (``on_messages_stream``) outside a Duet request,
with a scripted ``ChatCompletionClient``: what the two agents' unit tests share. No sockets."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from autogen_agentchat.base import Response
from autogen_agentchat.messages import (
    BaseAgentEvent,
    BaseChatMessage,
    ModelClientStreamingChunkEvent,
    TextMessage,
)
from autogen_core import CancellationToken
from autogen_core.models import (
    LLMMessage,
)
from duet.agents import AnswerAgent, ReasoningAgent
from duet.agents.upstream import ReasoningText

from tests.scripted_model_client import ScriptedModelClient, ScriptedTurn, text_result

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
