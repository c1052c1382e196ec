"""Putting the hidden part of a tool round back into the conversation a follow-up brings."""

from __future__ import annotations

from typing import Sequence

from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage, LLMMessage, SystemMessage, UserMessage

from duet.agents.continuations._store import Continuation


def splice(conversation: list[LLMMessage], index: int, continuation: Continuation) -> list[LLMMessage]:
    """The conversation with the hidden part of the tool round at ``index`` put back.

    The round in ``conversation`` is an assistant message with the client's calls followed by their
    results; it is replaced by the stored turn (earlier service rounds, the assistant message with
    every call) and the stored service results join the client's results.
    """
    if not continuation.turn:
        return conversation
    *earlier, full_calls, service_results = continuation.turn
    if not isinstance(full_calls, AssistantMessage) or not isinstance(service_results, FunctionExecutionResultMessage):
        return conversation
    following = conversation[index + 1] if index + 1 < len(conversation) else None
    client_results = following.content if isinstance(following, FunctionExecutionResultMessage) else []
    by_id = {r.call_id: r for r in [*service_results.content, *client_results]}
    calls = full_calls.content if isinstance(full_calls.content, list) else []
    merged = FunctionExecutionResultMessage(content=[by_id[c.id] for c in calls if c.id in by_id])
    rest = conversation[index + 2 :] if isinstance(following, FunctionExecutionResultMessage) else conversation[index + 1 :]
    return [*conversation[:index], *earlier, full_calls, merged, *rest]


def tool_rounds(conversation: Sequence[LLMMessage]) -> list[int]:
    """Indices of the assistant messages with tool calls since the last user message, oldest first."""
    rounds: list[int] = []
    for index in range(len(conversation) - 1, -1, -1):
        message = conversation[index]
        if isinstance(message, (UserMessage, SystemMessage)):
            break
        if isinstance(message, AssistantMessage) and isinstance(message.content, list):
            rounds.append(index)
    return rounds[::-1]
