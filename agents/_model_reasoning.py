"""The answer model's own reasoning on its tool-calling turns: kept, and sent back.

A thinking model used as the answer model (DeepSeek's thinking mode, Qwen3 thinking, GPT-5-class
models through reasoning fields, vLLM with a reasoning parser) wants the assistant message of each
tool-calling turn to carry the reasoning it produced on that turn in the next request; DeepSeek's API
refuses a request without it (HTTP 400, "Missing `reasoning_content` field in the assistant message").
Clients drop the field (Dify keeps only ``<think>`` text in the content), so Duet keeps it:

- the answer agent puts it on the turn's :class:`ReasonedAssistantMessage`, which its next service-tool
  round sends back, and which the continuation store keeps with the hidden part of a client round;
- a client's assistant message brings it back in ``reasoning_content`` / ``reasoning`` or, as Dify does,
  as ``<think>`` text in its content: the message is rebuilt from that when the stored round is gone;
- :func:`for_request` decides, per call, whether the history carries it (``pass_reasoning_back``), in the
  field the model spells it in; a tool-calling turn whose reasoning is not known carries a short note,
  never an empty field.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence, Union, get_args

from autogen_core.models import AssistantMessage, LLMMessage
from pydantic import BaseModel, Field

ReasoningField = Literal["reasoning_content", "reasoning", "reasoning_details"]
"""The spellings of reasoning in OpenAI-compatible APIs: DeepSeek, vLLM and Qwen say
``reasoning_content``; Ollama, Groq and OpenRouter ``reasoning``; OpenRouter adds structured
``reasoning_details`` (with signatures some providers need back)."""

REASONING_FIELDS: tuple[ReasoningField, ...] = get_args(ReasoningField)
DEFAULT_REASONING_FIELD: ReasoningField = "reasoning_content"

PassReasoningBack = Union[bool, Literal["auto"]]
DEFAULT_PASS_REASONING_BACK: PassReasoningBack = "auto"
"""Send the answer model's reasoning back on its tool-calling turns when it produced reasoning: a
thinking model needs it, and a model that never reasons (whose API may refuse an unknown field) never
gets it."""

REASONING_NOT_KEPT = "(The reasoning of this step was not kept.)"
"""What a tool-calling turn whose reasoning is unknown carries when reasoning is passed back."""


class ModelReasoning(BaseModel):
    """The reasoning a model produced on one tool-calling turn. ``field`` is how its upstream spelled
    it; ``None`` when it was rebuilt from text a client sent back (``<think>`` blocks)."""

    text: str = ""
    field: ReasoningField | None = None
    details: list[dict[str, Any]] | None = Field(None, description="reasoning_details as the upstream sent them.")

    @property
    def from_model(self) -> bool:
        """The model itself produced it (as opposed to text rebuilt from a client's message)."""
        return self.field is not None

    def wire(self, field: ReasoningField) -> dict[str, Any]:
        """The assistant message's reasoning fields, in ``field`` when none is known; never empty.

        >>> ModelReasoning(text="Check the units.").wire("reasoning_content")
        {'reasoning_content': 'Check the units.'}
        >>> ModelReasoning(text="plan", field="reasoning_details", details=[{"type": "reasoning.text", "text": "plan"}]).wire("reasoning")
        {'reasoning_details': [{'type': 'reasoning.text', 'text': 'plan'}]}
        """
        field = self.field or field
        text = self.text or REASONING_NOT_KEPT
        if field == "reasoning_details":
            return {"reasoning_details": self.details or [{"type": "reasoning.text", "text": text}]}
        return {field: text}


class ReasonedAssistantMessage(AssistantMessage):
    """An assistant message of tool calls with the reasoning its model produced on it. Still an
    ``AssistantMessage`` to everything in AutoGen; Duet's model client sends the reasoning with it."""

    reasoning: ModelReasoning


def with_reasoning(message: AssistantMessage, reasoning: ModelReasoning) -> ReasonedAssistantMessage:
    return ReasonedAssistantMessage(content=message.content, thought=message.thought, source=message.source, reasoning=reasoning)


def without_reasoning(message: ReasonedAssistantMessage) -> AssistantMessage:
    return AssistantMessage(content=message.content, thought=message.thought, source=message.source)


def calls_key(message: LLMMessage) -> str | None:
    """The key a tool-calling assistant message is kept under: its first call's id."""
    if isinstance(message, AssistantMessage) and isinstance(message.content, list) and message.content:
        return message.content[0].id
    return None


def sent_reasoning(message: Mapping[str, Any], think_text: str) -> ModelReasoning | None:
    """The reasoning a client sent back on an assistant message: its ``reasoning_content`` or
    ``reasoning`` field (the model's, said so by the client), else the ``<think>`` text of its content.

    >>> sent_reasoning({"role": "assistant", "reasoning_content": "plan"}, "")
    ModelReasoning(text='plan', field='reasoning_content', details=None)
    >>> sent_reasoning({"role": "assistant"}, "plan").from_model
    False
    """
    for field in ("reasoning_content", "reasoning"):
        value = message.get(field)
        if isinstance(value, str) and value.strip():
            return ModelReasoning(text=value, field=field)
    details = message.get("reasoning_details")
    if isinstance(details, list) and details and all(isinstance(detail, dict) for detail in details):
        return ModelReasoning(text=details_text(details), field="reasoning_details", details=details)
    return ModelReasoning(text=think_text) if think_text else None


def details_text(details: Sequence[Mapping[str, Any]]) -> str:
    """The readable text of ``reasoning_details`` (its text and summary parts; encrypted parts have none)."""
    return "".join(
        str(detail.get("text") or detail.get("summary") or "") for detail in details if isinstance(detail, Mapping)
    )


def reasoned_messages(history: Sequence[LLMMessage]) -> list[ReasonedAssistantMessage]:
    """The messages of ``history`` that carry a model's reasoning (compared by class: an
    ``isinstance`` check against a pydantic model costs ten times more, on every message of every request)."""
    return [message for message in history if message.__class__ is ReasonedAssistantMessage]


def for_request(history: Sequence[LLMMessage], pass_back: bool, field: ReasoningField | None) -> list[LLMMessage]:
    """``history`` as one model call sends it: with ``pass_back``, every tool-calling assistant
    message carries reasoning (its own, or :data:`REASONING_NOT_KEPT`) in the model's ``field``;
    without, none does."""
    out: list[LLMMessage] = []
    field = field or DEFAULT_REASONING_FIELD
    for message in history:
        if isinstance(message, AssistantMessage) and isinstance(message.content, list):
            if not pass_back:
                if isinstance(message, ReasonedAssistantMessage):
                    message = without_reasoning(message)
            else:
                known = message.reasoning if isinstance(message, ReasonedAssistantMessage) else ModelReasoning()
                if known.field is None or not (known.text or known.details):
                    message = with_reasoning(message, ModelReasoning(text=known.text, field=field))
        out.append(message)
    return out


_JOINED = ("text", "summary", "data")  # the string parts of a reasoning detail that arrive in fragments


def merge_details(fragments: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Streamed ``reasoning_details`` fragments joined into the details of the whole answer: the
    fragments of one detail (same ``type`` and ``index``) have their text joined, other keys
    (``signature``, ``format``, ``id``) kept from the last fragment that has them.

    >>> merge_details([{"type": "reasoning.text", "text": "Check ", "index": 0},
    ...                {"type": "reasoning.text", "text": "units.", "index": 0, "signature": "s1"}])
    [{'type': 'reasoning.text', 'text': 'Check units.', 'index': 0, 'signature': 's1'}]
    """
    merged: list[dict[str, Any]] = []
    for fragment in fragments:
        if not isinstance(fragment, Mapping):
            continue
        last = merged[-1] if merged else None
        if last is not None and last.get("type") == fragment.get("type") and last.get("index") == fragment.get("index"):
            for key, value in fragment.items():
                if key in _JOINED and isinstance(value, str) and isinstance(last.get(key), str):
                    last[key] += value
                elif value is not None:
                    last[key] = value
        else:
            merged.append(dict(fragment))
    return merged
