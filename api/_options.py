"""The answer model's options from a request, whatever its protocol: one path.

Each protocol's reader says what its client asked in no protocol's words (:class:`AskedOptions`:
the sampling fields under the answer model's names, the tool choice as a :class:`ToolChoice`), with
its own small mapping (:func:`sampling_args` and a table of its fields: which is max tokens, stop,
user; the shapes of its tool choice). :func:`answer_options` then makes the
:class:`~duet.agents.AnswerOptions` the same way for all three: parallel tool calls only with
tools, a named tool by the name the model sees, ``allowed_tools`` narrowing the tools, and the
refusals (a 400 naming the param, before any model call).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Any, Literal, Mapping

from pydantic import BaseModel

from duet._fields_set import every_field, share_fields_set
from duet.agents import AnswerOptions, CacheMark, ReasoningEffort
from duet.workbenches import ProxyTool, model_safe_name

from duet.api._errors import APIError


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """The tool choice a request made, in no protocol's words."""

    mode: Literal["auto", "none", "required"] = "auto"
    name: str | None = None
    """A tool the model must call (the client's name for it, a namespace's tools flattened)."""
    allowed: frozenset[str] | None = None
    """Only these tools (the client's names) are offered."""
    param: str = "tool_choice"
    """Where the request says it: what a refusal names."""
    spelled: str = "required"
    """How the protocol spells ``required`` (Anthropic's ``any``), for a refusal."""


@dataclass(slots=True)
class AskedOptions:
    """What a request asks of the answer model, in no protocol's words."""

    create_args: dict[str, Any] = field(default_factory=dict)
    """Request fields for the answer model, under their Chat Completions names (``max_tokens``, ``stop``, ``user``...)."""
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool | None = None
    single_tool_call: bool = False
    """At most one tool call (Chat Completions' legacy ``functions``)."""
    error_code: str | None = None
    """The ``code`` of this protocol's refusals of a tool choice."""
    reasoning_effort: ReasoningEffort | None = None
    """How much the client wants the model to think (none/minimal: no reasoner call)."""
    reasoning_budget: int | None = None
    """The client's thinking budget in tokens (0: thinking disabled)."""
    cache_marks: tuple[CacheMark, ...] = ()
    """The client's prompt-cache marks (Anthropic's ``cache_control``), for an upstream that takes them."""


def sampling_args(request: BaseModel, fields: Mapping[str, str]) -> dict[str, Any]:
    """The fields of ``request`` named in ``fields`` (its name → the answer model's) that the client
    sent, under the answer model's names. A field left out, ``null`` or an empty list asks for nothing
    (OpenAI refuses an empty ``stop`` list); a structured one goes on as the client sent it."""
    sent = request.model_fields_set
    args: dict[str, Any] = {}
    for name, target in fields.items():
        if name in sent:
            value = getattr(request, name)
            if value is not None and value != []:
                args[target] = value.model_dump(by_alias=True, exclude_unset=True) if isinstance(value, BaseModel) else value
    return args


def tool_cache_marks(tools: Any) -> tuple[CacheMark, ...]:
    """The ``cache_control`` marks on a request's tool definitions as sent (Chat Completions' ``function``
    entries, the Responses API's flat ones), by the name the model sees (OpenRouter keeps such a mark on
    the tool for Anthropic's models).

    >>> tool_cache_marks([{"type": "function", "function": {"name": "f"}, "cache_control": {"type": "ephemeral"}}])[0].text
    'f'
    """
    marks: list[CacheMark] = []
    for tool in tools if isinstance(tools, list) else ():
        control = tool.get("cache_control") if isinstance(tool, dict) else None
        if not isinstance(control, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str) and name:
            marks.append(CacheMark(role="tools", text=model_safe_name(name), control=control))
    return tuple(marks)


def answer_options(asked: AskedOptions, tools: list[ProxyTool],
                   service_tool_names: AbstractSet[str]) -> tuple[AnswerOptions, list[ProxyTool]]:
    """The answer model's options, and the client tools it is offered (an ``allowed`` list narrows
    them). Refuses (400) a tool choice the tools cannot meet."""
    create_args = asked.create_args
    choice = asked.tool_choice
    if choice.allowed is not None:
        tools = [tool for tool in tools if tool.client_name in choice.allowed]
    has_tools = bool(tools or service_tool_names)
    if has_tools and asked.parallel_tool_calls is not None:
        create_args["parallel_tool_calls"] = asked.parallel_tool_calls
    tool_choice: str = choice.mode
    if choice.name is not None:
        tool_choice = model_safe_name(choice.name)
        if tool_choice not in {tool.name for tool in tools} | service_tool_names:
            raise APIError(400, f"{choice.param} names '{choice.name[:100]}', which is not among the tools", param=choice.param,
                           code=asked.error_code)
    elif tool_choice == "required" and not has_tools:
        raise APIError(400, f"{choice.param} is '{choice.spelled}', but the request has no tools", param=choice.param,
                       code=asked.error_code)
    options = AnswerOptions(tool_choice=tool_choice, create_args=create_args, single_tool_call=asked.single_tool_call,
                            reasoning_effort=asked.reasoning_effort, reasoning_budget=asked.reasoning_budget,
                            cache_marks=asked.cache_marks)
    return share_fields_set(options, _EVERY_OPTION), tools  # kept as long as the stream: no set of its own


_EVERY_OPTION = every_field(AnswerOptions)
