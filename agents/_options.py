"""The answer model's options for one request (:class:`AnswerOptions`), as every protocol's reader
sets them from what its client asked."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]
"""How much the client wants the model to think (OpenAI's ``reasoning_effort`` values); ``none`` and
``minimal`` mean no reasoner call at all."""


class AnswerOptions(BaseModel):
    """Per-request options for the answer model, from the client's request."""

    tool_choice: Literal["auto", "none", "required"] | str = Field(
        "auto", description="'auto', 'none', 'required', or the (model-facing) name of the tool to call."
    )
    create_args: dict[str, Any] = Field(
        default_factory=dict,
        description="OpenAI request fields passed to the answer model: temperature, top_p, max_tokens, stop, seed, ...",
    )
    single_tool_call: bool = Field(False, description="Return at most one tool call (legacy 'functions' clients).")
    reasoning_effort: Optional[ReasoningEffort] = Field(
        None, description="The client's reasoning effort (Chat 'reasoning_effort', Responses 'reasoning.effort'); "
        "None: the pipeline's default.")
    reasoning_budget: Optional[int] = Field(
        None, ge=0, description="The client's thinking budget in tokens (Messages 'thinking.budget_tokens'); "
        "0: thinking disabled.")
