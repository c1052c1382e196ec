"""The answer model's options for one request (:class:`AnswerOptions`), as every protocol's reader
sets them from what its client asked."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]
"""How much the client wants the model to think (OpenAI's ``reasoning_effort`` values); ``none`` and
``minimal`` mean no reasoner call at all."""


class CacheMark(BaseModel):
    """A prompt-cache breakpoint the client put on its prompt (Anthropic's ``cache_control``, also
    OpenRouter's on OpenAI content parts): the end of ``text`` in the latest message of ``role`` whose
    text begins with it (in a system message: holds it), or, for ``role`` ``"tools"``, the tool named
    ``text``. Side data beside the conversation, so that the prompt's bytes never depend on where the
    client put its marks; each reader says where its joins put the end of the marked block."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool", "tools"]
    text: str = Field(min_length=1)
    control: dict[str, Any] = Field(description="The mark as the client sent it, e.g. {'type': 'ephemeral'}.")


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
    cache_marks: tuple[CacheMark, ...] = Field(
        (), description="The client's prompt-cache marks, sent on to an answer model whose upstream takes them.")
