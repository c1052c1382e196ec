"""A Chat Completions request → the :class:`~duet.agents.DuetRequest` its run gets, in the envelope
its writers read (:func:`chat_request`): the messages through the one converter every protocol uses
(:func:`duet.agents.conversation_from_openai`), the tools (or legacy ``functions``) as proxy tools,
passed on as received, and the answer model's options through the one options path
(:mod:`duet.api._options`) with this protocol's mapping."""

from __future__ import annotations

from typing import Any

from duet.agents import Duet, DuetRequest, cache_marks_from_openai, conversation_from_openai
from duet.workbenches import ProxyTool, proxy_tools_from_openai

from duet.api._errors import APIError
from duet.api._options import AskedOptions, ToolChoice, answer_options, sampling_args, tool_cache_marks
from duet.api._serving import WireRequest, new_response_id
from duet.api.chat._protocol import ANSWER_MODEL_FIELDS, ChatCompletionRequest, NamedFunction, NamedToolChoice

SAMPLING_FIELDS = {name: name for name in ANSWER_MODEL_FIELDS}
"""Chat Completions' fields for the answer model are its own: passed on under their names."""


def client_tools_of(request: ChatCompletionRequest, body: dict[str, Any]) -> list[ProxyTool]:
    """Proxy tools from the raw ``tools`` (or ``functions``) of the body: validated by the request
    model, but passed on as received (a pydantic dump would drop ``null`` values inside schemas)."""
    raw = body.get("tools") if request.tools is not None else body.get("functions")
    if not raw:  # most requests: no cache to consult
        return []
    validated = request.tools if request.tools is not None else request.functions
    try:  # keyed once: the validation of the list keyed it (KnownTools)
        return proxy_tools_from_openai(raw, getattr(validated, "content_key", None))
    except ValueError as exc:
        raise APIError(400, str(exc), param="tools" if request.tools is not None else "functions") from None


def asked_options(request: ChatCompletionRequest) -> AskedOptions:
    """Chat Completions' mapping: its own field names; ``tool_choice`` (or, for a legacy ``functions``
    client, ``function_call``) as a mode or a named function; legacy clients get one call at a time."""
    legacy_functions = request.legacy_functions
    # Legacy clients send functions and function_call; a client without tools may send either choice.
    legacy = request.tools is None and (request.functions is not None or request.tool_choice is None)
    if legacy and request.tool_choice not in (None, "auto"):  # it would be dropped: function_call decides here
        raise APIError(400, "tool_choice applies to tools; with functions, use function_call", param="tool_choice")
    choice = request.function_call if legacy else request.tool_choice
    param = "function_call" if legacy else "tool_choice"
    if isinstance(choice, NamedToolChoice):
        tool_choice = ToolChoice(name=choice.function.name, param=param)
    elif isinstance(choice, NamedFunction):
        tool_choice = ToolChoice(name=choice.name, param=param)
    else:
        tool_choice = ToolChoice(mode=choice or "auto", param=param)
    return AskedOptions(sampling_args(request, SAMPLING_FIELDS), tool_choice,
                        parallel_tool_calls=False if legacy_functions else request.parallel_tool_calls,
                        single_tool_call=legacy_functions, reasoning_effort=request.reasoning_effort)


def chat_request(request: ChatCompletionRequest, body: dict[str, Any], duet: Duet, owner: str, id_prefix: str) -> WireRequest:
    """What the run gets of ``request`` (everything the client sent, checked against ``duet``'s tools;
    a new response id as its request id), and of the parsed request, what the writers need: the
    request is not kept for as long as its stream lasts."""
    conversation = conversation_from_openai(request.messages)
    tools = client_tools_of(request, body)
    asked = asked_options(request)
    asked.cache_marks = cache_marks_from_openai(request.messages) + tool_cache_marks(body.get("tools"))
    options, tools = answer_options(asked, tools, duet.service_tool_names)
    run_request = DuetRequest(conversation, tools, options, request.user, owner, new_response_id(id_prefix))
    return WireRequest(run_request, request.model, request.stream, legacy=request.legacy_functions,
                       state={"include_usage": request.include_usage})
