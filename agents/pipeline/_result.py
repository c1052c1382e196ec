"""A whole run collected into one object: what a non-streaming caller gets."""

from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel

from duet.agents._events import (
    ContentDelta,
    DuetEvent,
    Finished,
    FinishReason,
    ReasoningDelta,
    ReasoningParagraphs,
    ToolCall,
    ToolCallsRequested,
    Usage,
)


class DuetResult(BaseModel):
    """A whole run, collected: what a non-streaming caller gets."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: FinishReason = "stop"
    hidden_part_lost: bool = False
    """The hidden part of the tool round could not be kept (the store was unavailable): the follow-up goes on without it."""

    @classmethod
    def of(cls, events: Sequence[DuetEvent]) -> "DuetResult":
        """Collects a run's events. Where the answer model's thinking follows the reasoner's, the
        reasoning starts a new paragraph (as the HTTP stream does)."""
        result = cls()
        reasoning: list[str] = []
        content: list[str] = []
        paragraphs = ReasoningParagraphs()
        for event in events:
            if isinstance(event, ReasoningDelta):
                reasoning.append(paragraphs.text(event))
            elif isinstance(event, ContentDelta):
                content.append(event.text)
            elif isinstance(event, ToolCallsRequested):
                result.tool_calls.extend(event.calls)
            elif isinstance(event, Usage):
                result.prompt_tokens += event.prompt_tokens
                result.completion_tokens += event.completion_tokens
                result.reasoning_tokens += event.reasoning_tokens
            elif isinstance(event, Finished):
                result.finish_reason = event.finish_reason
                result.hidden_part_lost = event.hidden_part_lost
        result.reasoning = "".join(reasoning)
        result.content = "".join(content)
        return result
