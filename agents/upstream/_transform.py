"""The wire transform: AutoGen messages, tools and call options as the body of an OpenAI
``/chat/completions`` request (as autogen-ext's ``_message_transform`` is for its clients)."""

from __future__ import annotations

import json
import sys
from typing import Any, Mapping, Optional, Sequence

from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel

from duet import _wire_json as wire_json
from duet.agents._model_reasoning import DEFAULT_REASONING_FIELD, ReasonedAssistantMessage
from duet.agents._options import CacheMark
from duet.agents._upstream_calls import UpstreamCall
from duet.agents.upstream._cache_hints import mark_messages, marked_tools
from duet.workbenches import derived_from


def message_to_openai(message: LLMMessage) -> list[dict[str, Any]]:
    """One AutoGen ``LLMMessage`` as OpenAI chat messages (a tool-result message becomes one per call).

    >>> from autogen_core.models import FunctionExecutionResult
    >>> message_to_openai(UserMessage(content="Hi", source="user"))
    [{'role': 'user', 'content': 'Hi'}]
    >>> message_to_openai(FunctionExecutionResultMessage(content=[
    ...     FunctionExecutionResult(content="18°C", call_id="call_1", name="weather"),
    ...     FunctionExecutionResult(content="21°C", call_id="call_2", name="weather")]))
    [{'role': 'tool', 'tool_call_id': 'call_1', 'content': '18°C'}, {'role': 'tool', 'tool_call_id': 'call_2', 'content': '21°C'}]
    """
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": message.content}]
    if isinstance(message, UserMessage):
        if isinstance(message.content, str):
            return [{"role": "user", "content": message.content}]
        parts = [
            {"type": "text", "text": part} if isinstance(part, str) else part.to_openai_format()
            for part in message.content
        ]
        return [{"role": "user", "content": parts}]
    if isinstance(message, AssistantMessage):
        if isinstance(message.content, str):
            return [{"role": "assistant", "content": message.content}]
        calls = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments},
             **(call.extra if call.__class__ is UpstreamCall else {})}
            for call in message.content
        ]
        entry: dict[str, Any] = {"role": "assistant", "content": message.thought or None, "tool_calls": calls}
        if isinstance(message, ReasonedAssistantMessage):  # the model's own reasoning, sent back as its API expects
            entry.update(message.reasoning.wire(DEFAULT_REASONING_FIELD))
        return [entry]
    if isinstance(message, FunctionExecutionResultMessage):
        return [{"role": "tool", "tool_call_id": result.call_id, "content": result.content} for result in message.content]
    raise TypeError(f"Unsupported message type: {type(message).__name__}")


_PLAIN_ROLES: dict[type, str] = {SystemMessage: "system", UserMessage: "user", AssistantMessage: "assistant"}


def messages_to_openai(messages: Sequence[LLMMessage]) -> list[dict[str, Any]]:
    """A conversation as OpenAI chat messages: :func:`message_to_openai` of each, a plain text turn
    (most of a long history) written directly.

    >>> messages_to_openai([SystemMessage(content="Be brief."), UserMessage(content="Hi", source="user")])
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = _PLAIN_ROLES.get(message.__class__)  # the exact class: a subclass may carry more (reasoning)
        if role is not None and message.content.__class__ is str:
            out.append({"role": role, "content": message.content})
        else:
            out.extend(message_to_openai(message))
    return out


def tool_to_openai(tool: Tool | ToolSchema) -> dict[str, Any]:
    """An AutoGen tool as an OpenAI ``tools`` entry; ``parameters`` is passed through untouched.

    >>> tool_to_openai({"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
    {'type': 'function', 'function': {'name': 'weather', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}}}}
    """
    schema = _schema_of(tool)
    function: dict[str, Any] = {"name": schema["name"]}
    if "description" in schema:
        function["description"] = schema["description"]
    if "parameters" in schema:
        function["parameters"] = schema["parameters"]
    if "strict" in schema:
        function["strict"] = schema["strict"]
    return {"type": "function", "function": function}


def _schema_of(tool: Tool | ToolSchema) -> Mapping[str, Any]:
    # A dict first: isinstance against the runtime-checkable Tool protocol inspects every member.
    if isinstance(tool, dict):
        return tool
    return tool.schema if isinstance(tool, Tool) else tool


def _encode_tool(schema: Mapping[str, Any]) -> str:
    return json.dumps(tool_to_openai(schema), ensure_ascii=False)  # type: ignore[arg-type]


def tools_json(tools: Sequence[Tool | ToolSchema], marked: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The OpenAI ``tools`` list as JSON. Each client tool's entry is encoded once, however many
    requests, stages and rounds send it (:func:`~duet.workbenches.derived_from`); a tool ``marked``
    (by name: a client's cache mark) carries its ``cache_control``.

    >>> tools_json([{"name": "weather"}])
    '[{"type": "function", "function": {"name": "weather"}}]'
    >>> tools_json([{"name": "weather"}], {"weather": {"type": "ephemeral"}})
    '[{"type": "function", "function": {"name": "weather"}, "cache_control": {"type": "ephemeral"}}]'
    """
    if marked:
        return "[" + ", ".join(_encode_marked(_schema_of(tool), marked) for tool in tools) + "]"
    return "[" + ", ".join(
        derived_from(_schema_of(tool), "openai_json", _encode_tool) for tool in tools
    ) + "]"


def _encode_marked(schema: Mapping[str, Any], marked: Mapping[str, Mapping[str, Any]]) -> str:
    control = marked.get(schema["name"])
    if control is None:
        return derived_from(schema, "openai_json", _encode_tool)
    return json.dumps({**tool_to_openai(schema), "cache_control": control}, ensure_ascii=False)  # type: ignore[arg-type]


def _tool_choice_to_openai(tool_choice: Tool | str) -> Any:
    if isinstance(tool_choice, str):
        return tool_choice
    return {"type": "function", "function": {"name": tool_choice.schema["name"]}}


def _response_format(json_output: Optional[bool | type[BaseModel]]) -> dict[str, Any] | None:
    if json_output is True:
        return {"type": "json_object"}
    if isinstance(json_output, type):
        return {
            "type": "json_schema",
            "json_schema": {"name": json_output.__name__, "schema": json_output.model_json_schema()},
        }
    return None


def flat_create_args(create_args: Mapping[str, Any]) -> dict[str, Any]:
    """A client's configured request fields with its ``extra_body`` (vendor fields) merged in: what
    every request body starts from.

    >>> flat_create_args({"temperature": 0, "extra_body": {"top_k": 20}})
    {'temperature': 0, 'top_k': 20}
    """
    extra_body = create_args.get("extra_body") or {}
    return {k: v for k, v in create_args.items() if k != "extra_body"} | extra_body


def request_body(
    model: str,
    default_args: Mapping[str, Any],
    messages: Sequence[LLMMessage],
    tools: Sequence[Tool | ToolSchema],
    tool_choice: Tool | str,
    json_output: Optional[bool | type[BaseModel]],
    extra_create_args: Mapping[str, Any],
    marks: Sequence[CacheMark] = (),
) -> bytes:
    """The JSON body of a streamed ``/chat/completions`` request: ``default_args`` (see
    :func:`flat_create_args`), then the call's ``extra_create_args`` (its ``extra_body`` merged in),
    always asking for the usage chunk; the tools, each encoded once, as its last field; the client's
    cache ``marks`` on its messages and tools (:mod:`~duet.agents.upstream._cache_hints`).

    >>> request_body("m", {"temperature": 0}, [UserMessage(content="Hi", source="user")], [], "auto", None, {})
    b'{"model":"m","messages":[{"role":"user","content":"Hi"}],"temperature":0,"stream":true,"stream_options":{"include_usage":true}}'
    """
    body: dict[str, Any] = {"model": model, "messages": messages_to_openai(messages)}
    if marks:
        mark_messages(body["messages"], marks)
    body.update(default_args)
    if extra_create_args:
        extra_body = extra_create_args.get("extra_body")
        body.update(extra_create_args)
        if extra_body:
            del body["extra_body"]
            body.update(extra_body)
    if tools:
        body.pop("tools", None)  # replaced by the encoded list, spliced in below
        body["tool_choice"] = _tool_choice_to_openai(tool_choice)
    response_format = _response_format(json_output)
    if response_format is not None:
        body["response_format"] = response_format
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    encoded = wire_json.dumps(body)
    if tools:  # the tools, each encoded once, as the body's last field
        encoded = b"%s,\"tools\":%s}" % (encoded[:-1], tools_json(tools, marked_tools(marks) if marks else None).encode())
    return encoded


def streaming_create_args(client: ChatCompletionClient, create_args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``extra_create_args`` of a streamed call to ``client``: ``create_args``, plus the request
    for the usage chunk (``stream_options.include_usage``) that AutoGen's OpenAI clients do not send
    by themselves. Duet's own client always sends it; other clients may reject OpenAI's field."""
    # A client of autogen-ext's OpenAI module exists only once that module is imported: none is imported here.
    openai_clients = sys.modules.get("autogen_ext.models.openai")
    if openai_clients is not None and isinstance(client, openai_clients.BaseOpenAIChatCompletionClient):
        return {**create_args, "stream_options": {"include_usage": True}}
    return create_args
