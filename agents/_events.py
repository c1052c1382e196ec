"""The one event vocabulary between the duet and whoever consumes it.

The agents emit these while a request runs; ``api/`` turns them into OpenAI chunks, and a
Python script iterates them through :class:`duet.agents.Duet`. Every event is a small pydantic model
with a ``kind`` discriminator, so a stream of them can be logged or sent elsewhere as JSON.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field


class ReasoningDelta(BaseModel):
    """A piece of thinking: from the reasoning model, the answer model's own reasoning, or a
    progress line while service tools run."""

    kind: Literal["reasoning"] = "reasoning"
    text: str
    source: str


class ReusedReasoning(ReasoningDelta):
    """Reasoning a retry of the same request reuses (:class:`~duet.agents.continuations.ReasoningLedger`):
    no model was called for it. Rendered as any reasoning; the HTTP service holds its status line back
    past it, so a retry whose answer model fails again gets the real status."""


class ContentDelta(BaseModel):
    """A piece of the answer text."""

    kind: Literal["content"] = "content"
    text: str


class ToolCall(BaseModel):
    """One call of a client tool, with the client's own tool name and the arguments as a JSON string."""

    id: str
    name: str
    arguments: str


class ToolCallsRequested(BaseModel):
    """The answer model called client tools: the client runs them and sends the results back."""

    kind: Literal["tool_calls"] = "tool_calls"
    calls: list[ToolCall]


UsageOrigin = Literal["upstream", "estimate", "reused"]
"""Where a usage figure comes from: the upstream's own count; Duet's estimate (a call Duet closed
early, whose usage never arrived); a reasoning reused from an earlier request (no new tokens)."""


class Usage(BaseModel):
    """Token usage of one model call; a request's usage is the sum of all of them."""

    kind: Literal["usage"] = "usage"
    source: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int = Field(0, description="Of the completion tokens, those spent on reasoning.")
    cached_tokens: int = Field(0, description="Of the prompt tokens, those the upstream read from its prompt cache.")
    origin: UsageOrigin = Field("upstream", description="upstream: counted by the upstream; estimate: by Duet; reused: none new.")


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class Finished(BaseModel):
    """The duet is done; always the last event of a successful run."""

    kind: Literal["done"] = "done"
    finish_reason: FinishReason
    hidden_part_lost: bool = Field(
        False, description="The run ended with client tool calls, and the hidden part of its round could not be kept "
        "(the store was unavailable): the follow-up goes on without it.")


class Failed(BaseModel):
    """The run failed; always the last event of a failed run. ``error`` is the exception."""

    model_config = {"arbitrary_types_allowed": True}

    kind: Literal["error"] = "error"
    message: str
    error: BaseException = Field(exclude=True)


DuetEvent = Annotated[
    Union[ReasoningDelta, ContentDelta, ToolCallsRequested, Usage, Finished, Failed],
    Field(discriminator="kind"),
]


class ReasoningParagraphs:
    """Joins reasoning from several sources: where one source's thinking follows another's (the
    answer model's own after the reasoner's), it starts a new paragraph (an empty delta starts
    nothing). The one home of that rule, for the HTTP responses and :class:`duet.agents.DuetResult` alike.

    >>> paragraphs = ReasoningParagraphs()
    >>> [paragraphs.text(ReasoningDelta(text=t, source=s)) for t, s in [("a", "reasoner"), ("b", "reasoner"), ("c", "answerer")]]
    ['a', 'b', '\\n\\nc']
    """

    __slots__ = ("_source",)

    def __init__(self) -> None:
        self._source = ""

    def text(self, delta: ReasoningDelta) -> str:
        """``delta``'s text, after a paragraph break if it comes from another source than the last one."""
        if delta.source == self._source or not delta.text:
            return delta.text
        previous, self._source = self._source, delta.source
        return "\n\n" + delta.text if previous else delta.text
