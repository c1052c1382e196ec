"""Chat Completions (``/v1/chat/completions``) on the shared request flow: its reader (an OpenAI
request → a :class:`~duet.api._serving.RunRequest`) and its writers (chunks, or one ``chat.completion``)."""

from __future__ import annotations

import time
from typing import AbstractSet, Any, NamedTuple


from duet.agents import AnswerOptions, Duet, conversation_from_openai
from duet.workbenches import ProxyTool, model_safe_name, proxy_tools_from_openai

from duet.api.chat._stream import ChunkEncoder, ChunkWriter
from duet.api.chat._fold import CompletionFold
from duet.api._errors import APIError
from duet.api._tools import tool_choice_alias
from duet.api.chat._protocol import ANSWER_MODEL_FIELDS, ChatCompletionRequest, NamedFunction, NamedToolChoice, ResponseFormat
from duet.api._serving import RunRequest, WireProtocol, validated_body
from duet.api._settings import ServiceOptions


def _parse_request(raw: bytes, options: ServiceOptions) -> tuple[ChatCompletionRequest, dict[str, Any]]:
    """The validated request, and the body as parsed (tool schemas are passed on from it, untouched).
    Everything that can be refused without a model is refused here, with a 400 naming the param."""
    return validated_body(raw, ChatCompletionRequest, (("messages", options.max_messages), ("tools", options.max_tools), ("functions", options.max_tools)))


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


def answer_options(request: ChatCompletionRequest, tools: list[ProxyTool], service_tool_names: AbstractSet[str]) -> AnswerOptions:
    """The request's knobs for the answer model."""
    create_args: dict[str, Any] = {}
    if not request.model_fields_set.isdisjoint(ANSWER_MODEL_FIELDS):  # a field left out is None: only the sent are read
        for name in ANSWER_MODEL_FIELDS:
            value = getattr(request, name)
            if value is not None and value != []:  # an empty stop list asks for nothing, and OpenAI refuses one
                create_args[name] = value.as_sent() if isinstance(value, ResponseFormat) else value
    has_tools = bool(tools or service_tool_names)
    if has_tools and request.parallel_tool_calls is not None:
        create_args["parallel_tool_calls"] = request.parallel_tool_calls
    if has_tools and request.legacy_functions:
        create_args["parallel_tool_calls"] = False

    # Legacy clients send functions and function_call; a client without tools may send either choice.
    legacy = request.tools is None and (request.functions is not None or request.tool_choice is None)
    if legacy and request.tool_choice not in (None, "auto"):  # it would be dropped: function_call decides here
        raise APIError(400, "tool_choice applies to tools; with functions, use function_call", param="tool_choice")
    choice = request.function_call if legacy else request.tool_choice
    param = "function_call" if legacy else "tool_choice"
    tool_choice = "auto"
    if isinstance(choice, str):
        if choice == "required" and not has_tools:
            raise APIError(400, f"{param} is 'required', but the request has no tools", param=param)
        tool_choice = choice
    elif isinstance(choice, (NamedToolChoice, NamedFunction)):
        name = choice.function.name if isinstance(choice, NamedToolChoice) else choice.name
        tool_choice = tool_choice_alias(name, tools, service_tool_names, param)
    return AnswerOptions(tool_choice=tool_choice, create_args=create_args, single_tool_call=request.legacy_functions)


class ParsedChat(NamedTuple):
    """A validated request and its body as parsed (the tool schemas are passed on from the body)."""

    request: ChatCompletionRequest
    body: dict[str, Any]

    @property
    def model(self) -> str:
        return self.request.model


class ChatCompletions(WireProtocol[ParsedChat]):
    """``/v1/chat/completions``: OpenAI chunks (``: ping`` keep-alives, a ``data: {"error": …}``
    event after the stream began) or one ``chat.completion``; errors as OpenAI error bodies."""

    id_prefix = "chatcmpl-"

    def parse(self, raw: bytes, options: ServiceOptions) -> ParsedChat:
        return ParsedChat(*_parse_request(raw, options))

    async def prepare(self, parsed: ParsedChat, duet: Duet, owner: str) -> RunRequest:
        wire, body = parsed
        conversation = conversation_from_openai(wire.messages)
        tools = client_tools_of(wire, body)
        options = answer_options(wire, tools, duet.service_tool_names)
        # Of the parsed request, the writers need one flag: the request is not kept for as long as its stream lasts.
        return RunRequest(wire.model, wire.stream, conversation, tools, options, user=wire.user, legacy=wire.legacy_functions,
                          state={"include_usage": wire.include_usage})

    def stream_writer(self, request: RunRequest, response_id: str) -> ChunkWriter:
        return ChunkWriter(ChunkEncoder(response_id, int(time.time()), request.model), request.state["include_usage"])

    def fold(self, request: RunRequest, response_id: str) -> CompletionFold:
        return CompletionFold(response_id, int(time.time()), request.model)
