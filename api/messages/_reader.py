"""An Anthropic Messages request → what the duet runs on: the conversation (AutoGen ``LLMMessage``
objects, through the same conversion Chat Completions uses), the client tools (``ProxyTool`` objects
built from each ``input_schema``) and the answer model's options.

The messages are translated block by block into OpenAI chat messages, checked on the way (a bad
block is a 400 naming it, ``messages.2.content.0.source``), and handed to
:func:`duet.agents.conversation_from_openai`, which strips ``<think>`` blocks, pairs tool calls with
their results and repairs what a model would reject. What the answer model never sees:
``thinking`` / ``redacted_thinking`` blocks (like ``<think>`` in chat history), ``cache_control``
marks (read beside the conversation, :mod:`duet.api.messages._cache_marks`, for an upstream that takes
them), and Anthropic's own tools (``web_search_…``, ``bash_…``, …: no ``input_schema`` to hand a
model), which are dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from autogen_core.models import FunctionExecutionResultMessage, LLMMessage

from duet.agents import CacheMark, ConversationError, Duet, DuetRequest, conversation_from_openai
from duet.workbenches import ProxyTool, proxy_tools_from_openai

from duet.api._options import AskedOptions, ToolChoice, answer_options, sampling_args
from duet.api._serving import WireRequest, new_response_id
from duet.api._errors import APIError
from duet.api.messages._protocol import AnyToolChoice, MessagesRequest, NamedToolChoice, NoToolChoice

ERROR_PREFIX = "Error: "
"""Starts the text of a ``tool_result`` with ``is_error``."""

DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Blocks kept from the answer model: a model's earlier thinking, as ``<think>`` is in chat history."""


@dataclass
class MessagesInput:
    """What one request gives the duet, before a pipeline is chosen."""

    conversation: list[LLMMessage]
    tools: list[ProxyTool]
    chat_messages: list[dict[str, Any]]
    """The conversation as OpenAI chat messages (what ``count_tokens`` measures)."""


def read_input(request: MessagesRequest) -> MessagesInput:
    """The conversation and client tools of ``request``; an :class:`APIError` (400) names what is unusable."""
    tools = client_tools(request)
    chat_messages = chat_messages_of(request)
    error_ids: set[str] = set()
    for message in chat_messages:
        if message.get("is_error"):
            error_ids.add(message["tool_call_id"])
    try:
        conversation = conversation_from_openai(chat_messages)
    except ConversationError as exc:  # the checks here leave little to it; its index is of the translated list
        raise APIError(400, f"messages: {exc}", param="messages", code="invalid_message") from None
    if error_ids:
        conversation = [_mark_errors(message, error_ids) for message in conversation]
    return MessagesInput(conversation, tools, chat_messages)


def _mark_errors(message: LLMMessage, error_ids: set[str]) -> LLMMessage:
    """``tool_result`` blocks with ``is_error``: the results the model sees as failures."""
    if not isinstance(message, FunctionExecutionResultMessage):
        return message
    results = [r.model_copy(update={"is_error": True}) if r.call_id in error_ids else r for r in message.content]
    return FunctionExecutionResultMessage(content=results)


def client_tools(request: MessagesRequest) -> list[ProxyTool]:
    """One :class:`ProxyTool` per client tool, its ``input_schema`` passed on as received (checked, as a
    function's parameters are, by the request model); Anthropic's own tool types are dropped."""
    entries = []
    for index, tool in enumerate(request.tools or []):
        if tool.input_schema is None:
            if tool.type in (None, "custom"):
                raise APIError(400, f"tools.{index}.input_schema: Field required", param=f"tools.{index}.input_schema")
            continue  # web_search_20250305, bash_20250124, …: run by Anthropic's servers or known only to its models
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description is not None:
            function["description"] = tool.description
        entries.append({"type": "function", "function": function})
    try:
        return proxy_tools_from_openai(entries)
    except ValueError as exc:
        raise APIError(400, f"tools: {exc}", param="tools") from None


SAMPLING_FIELDS = {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "stop_sequences": "stop"}
"""Anthropic's fields for the answer model, by their Chat Completions names (``metadata.user_id`` aside)."""


def asked_options(request: MessagesRequest) -> AskedOptions:
    """Anthropic's mapping: its field names, ``metadata.user_id`` as the ``user``, and its tool choices
    (``none``, ``any`` for required, a named tool; ``disable_parallel_tool_use`` for one call at a time)."""
    create_args = sampling_args(request, SAMPLING_FIELDS)
    if request.metadata is not None and request.metadata.user_id:
        create_args["user"] = request.metadata.user_id
    choice = request.tool_choice
    if isinstance(choice, NoToolChoice):
        tool_choice = ToolChoice(mode="none")
    elif isinstance(choice, AnyToolChoice):
        tool_choice = ToolChoice(mode="required", spelled="any")
    elif isinstance(choice, NamedToolChoice):
        tool_choice = ToolChoice(name=choice.name, param="tool_choice.name")
    else:
        tool_choice = ToolChoice()
    parallel = False if getattr(choice, "disable_parallel_tool_use", None) else None
    return AskedOptions(create_args, tool_choice, parallel_tool_calls=parallel, reasoning_budget=thinking_budget(request.thinking))


def thinking_budget(thinking: dict[str, Any] | None) -> int | None:
    """``thinking`` as a budget in tokens: ``disabled`` is 0 (no reasoner call), ``enabled`` its
    ``budget_tokens``; ``adaptive`` or none: the pipeline decides (``None``)."""
    kind = (thinking or {}).get("type")
    if kind == "disabled":
        return 0
    budget = (thinking or {}).get("budget_tokens")
    if kind == "enabled" and isinstance(budget, int) and not isinstance(budget, bool):
        if budget < 1:
            raise APIError(400, "thinking.budget_tokens: must be at least 1", param="thinking.budget_tokens",
                           code="invalid_request_error")
        return budget
    return None


def messages_request(request: MessagesRequest, given: MessagesInput, duet: Duet, owner: str, id_prefix: str,
                     cache_marks: tuple[CacheMark, ...] = ()) -> WireRequest:
    """What the run gets of ``request``: its conversation and client tools (:func:`read_input`), the
    answer model's options checked against ``duet``'s tools (and the request's ``cache_marks``), a new
    response id; its writers need nothing more of it."""
    asked = asked_options(request)
    asked.cache_marks = cache_marks
    options, tools = answer_options(asked, given.tools, duet.service_tool_names)
    user = request.metadata.user_id if request.metadata is not None else None
    run_request = DuetRequest(given.conversation, tools, options, user, owner, new_response_id(id_prefix))
    return WireRequest(run_request, request.model, request.stream)


def chat_messages_of(request: MessagesRequest) -> list[dict[str, Any]]:
    """``system`` and ``messages`` as OpenAI chat messages. A ``tool_result`` becomes a ``tool``
    message (``is_error`` kept beside it for :func:`read_input`); the rest of its user turn follows."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": _text(request.system, "system")})
    for index, message in enumerate(request.messages):
        param = f"messages.{index}"
        role = message.get("role")
        content = message.get("content")
        if (isinstance(content, list) and not content) or content is None:
            raise APIError(400, f"{param}.content: a message needs content", param=f"{param}.content")
        if role == "user":
            out += _user_turn(content, f"{param}.content")
        elif role == "assistant":
            turn = _assistant_turn(content, f"{param}.content")
            if turn is not None:
                out.append(turn)
        elif role == "system":  # Claude Code sends some of its instructions so
            out.append({"role": "system", "content": _text(content, f"{param}.content")})
        else:
            raise APIError(400, f"{param}.role: must be 'user' or 'assistant', got {str(role)[:40]!r}", param=f"{param}.role")
    return out


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """``content`` as a list of blocks (a string is one text block), each an object with a string
    ``type`` (a list or an object there is no type, and must never reach a lookup by name)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise APIError(400, f"{param}: must be a string or a list of content blocks", param=param)
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise APIError(400, f"{param}.{index}: a content block must be an object", param=f"{param}.{index}")
        if not isinstance(block.get("type"), str):
            raise APIError(400, f"{param}.{index}.type: a content block needs a string type", param=f"{param}.{index}.type")
    return content


def _text_of(block: dict[str, Any], param: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise APIError(400, f"{param}.text: a text block needs a string 'text'", param=f"{param}.text")
    return text


def _unsupported(kind: Any, param: str) -> APIError:
    return APIError(400, f"{param}.type: content blocks of type {str(kind)[:60]!r} are not supported here", param=f"{param}.type")


def _text(content: Any, param: str) -> str:
    """A content that may hold only text (``system``, a ``tool_result`` without images)."""
    texts = []
    for index, block in enumerate(_blocks(content, param)):
        if block.get("type") != "text":
            raise _unsupported(block.get("type"), f"{param}.{index}")
        texts.append(_text_of(block, f"{param}.{index}"))
    return "\n\n".join(texts) if isinstance(content, list) else texts[0]


def _image_part(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):  # type: ignore[union-attr]
        url = f"data:{source['media_type']};base64,{source['data']}"  # type: ignore[index]
    elif kind == "url" and isinstance(source.get("url"), str) and source["url"]:  # type: ignore[union-attr,index]
        url = source["url"]  # type: ignore[index]
    else:
        raise APIError(400, f"{param}.source: an image needs a 'base64' source (media_type, data) or a 'url' source",
                       param=f"{param}.source")
    return {"type": "image_url", "image_url": {"url": url}}


def _user_turn(content: Any, param: str) -> list[dict[str, Any]]:
    """Tool results first (a ``tool`` message each), then the turn's text and images as one user message."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(_blocks(content, param)):
        block_param = f"{param}.{index}"
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": _text_of(block, block_param)})
        elif kind == "image":
            parts.append(_image_part(block, block_param))
        elif kind == "tool_result":
            results.append(_tool_result(block, block_param, parts))
        elif kind not in DROPPED_BLOCKS:
            raise _unsupported(kind, block_param)
    if parts:
        only_text = all(part["type"] == "text" for part in parts)
        user = "".join(part["text"] for part in parts) if only_text else parts
        results.append({"role": "user", "content": user})
    return results


def _tool_result(block: dict[str, Any], param: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``tool`` message; the result's images go to ``parts`` (a tool message holds only text)."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise APIError(400, f"{param}.tool_use_id: a tool_result needs the id of its tool_use", param=f"{param}.tool_use_id")
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": tool_result_text(block, param, parts)}
    if block.get("is_error") is True:
        # OpenAI-compatible models have no field for it: the text says so, and the result is marked (read_input).
        message["content"] = f"{ERROR_PREFIX}{message['content']}"
        message["is_error"] = True
    return message


def tool_result_text(block: dict[str, Any], param: str = "tool_result", parts: list[dict[str, Any]] | None = None) -> str:
    """The text of a ``tool_result`` (without the error prefix); its images go to ``parts`` when given."""
    content = block.get("content")
    texts = []
    if content is not None:
        for index, item in enumerate(_blocks(content, f"{param}.content")):
            kind = item.get("type")
            if kind == "text":
                texts.append(_text_of(item, f"{param}.content.{index}"))
            elif kind == "image":
                if parts is not None:
                    parts.append(_image_part(item, f"{param}.content.{index}"))
                texts.append("(an image, shown after the results)")
            else:  # what a tool returned is the model's to read: Claude Code's tool search returns tool_reference blocks
                texts.append(json.dumps(item, ensure_ascii=False))
    return "\n\n".join(texts)


def _assistant_turn(content: Any, param: str) -> dict[str, Any] | None:
    """The assistant message; ``None`` for a turn that was only thinking."""
    texts = []
    calls = []
    for index, block in enumerate(_blocks(content, param)):
        block_param = f"{param}.{index}"
        kind = block.get("type")
        if kind == "text":
            texts.append(_text_of(block, block_param))
        elif kind == "tool_use":
            name, call_id, arguments = block.get("name"), block.get("id"), block.get("input", {})
            if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
                raise APIError(400, f"{block_param}: a tool_use needs a string 'id' and 'name'", param=block_param)
            if not isinstance(arguments, dict):
                raise APIError(400, f"{block_param}.input: must be an object", param=f"{block_param}.input")
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}})
        elif kind not in DROPPED_BLOCKS:
            raise _unsupported(kind, block_param)
    if not texts and not calls:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message
