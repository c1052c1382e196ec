"""What a model call returns: :class:`UpstreamResult`, built by :func:`build_result` from what the
answer held, and the usage arithmetic around it."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage

from duet.agents._model_reasoning import ReasoningField

FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "function_calls",
    "function_call": "function_calls",
    "content_filter": "content_filter",
}
"""An upstream's ``finish_reason`` as AutoGen names it (any other: ``"unknown"``)."""


class UpstreamResult(CreateResult):
    """A ``CreateResult`` that also says how the upstream spelled its reasoning (the field a thinking
    model wants it back in), its ``reasoning_details``, the reasoning tokens its usage counted and the
    prompt tokens it read from its prompt cache."""

    reasoning_field: Optional[ReasoningField] = None
    reasoning_details: Optional[list[dict[str, Any]]] = None
    reasoning_tokens: int = 0
    cached_tokens: int = 0


def cached_tokens(usage: Mapping[str, Any] | None) -> int:
    """The prompt tokens an upstream read from its prompt cache: OpenAI's
    ``prompt_tokens_details.cached_tokens``, DeepSeek's ``prompt_cache_hit_tokens``, or an Anthropic-style
    ``cache_read_input_tokens`` (0 when not reported).

    >>> cached_tokens({"prompt_tokens": 90, "prompt_tokens_details": {"cached_tokens": 64}}), cached_tokens({"prompt_cache_hit_tokens": 8})
    (64, 8)
    """
    usage = usage or {}
    details = usage.get("prompt_tokens_details")
    for value in (details.get("cached_tokens") if isinstance(details, dict) else None,  # JSON: a dict (no ABC check per call)
                  usage.get("prompt_cache_hit_tokens"), usage.get("cache_read_input_tokens")):
        if type(value) is int and value > 0:  # not a bool
            return value
    return 0


def reasoning_tokens(usage: Mapping[str, Any] | None) -> int:
    """``completion_tokens_details.reasoning_tokens`` of an upstream's usage (0 when not reported).

    >>> reasoning_tokens({"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}})
    7
    """
    details = (usage or {}).get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if type(value) is int and value > 0 else 0  # not a bool


def build_result(
    text: str,
    reasoning: str | None,
    calls: list[FunctionCall],
    finish_reason: str | None,
    usage: Mapping[str, Any] | None,
    reasoning_field: ReasoningField | None = None,
    details: list[dict[str, Any]] | None = None,
) -> UpstreamResult:
    """The result of an answer: its tool calls (``thought`` is then the text said beside them, or the
    reasoning), or its text.

    >>> build_result("Hi.", "Greet.", [], "stop", {"prompt_tokens": 3, "completion_tokens": 2}).usage
    RequestUsage(prompt_tokens=3, completion_tokens=2)
    """
    reasoning_extras: dict[str, Any] = {
        "reasoning_field": reasoning_field, "reasoning_details": details, "reasoning_tokens": reasoning_tokens(usage),
        "cached_tokens": cached_tokens(usage),
    }
    request_usage = RequestUsage(
        prompt_tokens=int((usage or {}).get("prompt_tokens") or 0),
        completion_tokens=int((usage or {}).get("completion_tokens") or 0),
    )
    if calls:
        return UpstreamResult(
            finish_reason="function_calls",
            content=calls,
            usage=request_usage,
            cached=False,
            thought=text or reasoning,
            **reasoning_extras,
        )
    return UpstreamResult(
        finish_reason=FINISH_REASONS.get(finish_reason or "", "unknown"),
        content=text,
        usage=request_usage,
        cached=False,
        thought=reasoning,
        **reasoning_extras,
    )


def add_usage(a: RequestUsage, b: RequestUsage) -> RequestUsage:
    """Two usages summed.

    >>> add_usage(RequestUsage(prompt_tokens=1, completion_tokens=2), RequestUsage(prompt_tokens=3, completion_tokens=4))
    RequestUsage(prompt_tokens=4, completion_tokens=6)
    """
    return RequestUsage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens, completion_tokens=a.completion_tokens + b.completion_tokens
    )
