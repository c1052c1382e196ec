"""Anthropic Messages (``/v1/messages``) on the shared request flow, and ``/v1/messages/count_tokens``."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from duet.agents import Duet, ReasoningOutput

from duet.api._errors import APIError
from duet.api._limits import is_json
from duet.api._serving import Service, WireProtocol, WireRequest, validated_body
from duet.api._settings import ServiceOptions
from duet.api._validation import LARGE_BODY_BYTES
from duet.api.messages._errors import error_response
from duet.api.messages._fold import MessageFold
from duet.api.messages._protocol import CountTokensRequest, CountTokensResponse, MessagesRequest
from duet.api.messages._cache_marks import cache_marks
from duet.api.messages._reader import MessagesInput, messages_request, read_input
from duet.api.messages._stream import PING, MessageStreamWriter
from duet.api.messages._tokens import estimate_input_tokens


class ParsedMessages(NamedTuple):
    """A validated request and what it gives the duet (conversation, client tools)."""

    request: MessagesRequest
    input: MessagesInput

    model: str  # the pipeline it names


def parse_messages(raw: bytes, options: ServiceOptions, model: type[MessagesRequest] = MessagesRequest) -> ParsedMessages:
    """The body, validated and converted: everything that can be refused without a model is refused
    here, with a 400 naming the param."""
    request, _ = validated_body(raw, model, (("messages", options.max_messages), ("tools", options.max_tools)))
    return ParsedMessages(request, read_input(request), request.model)


class AnthropicMessages(WireProtocol[ParsedMessages]):
    """``/v1/messages``: named SSE events (``event: ping`` keep-alives, an ``event: error`` after the
    stream began) or one ``message``; errors as Anthropic error bodies."""

    id_prefix = "msg_"
    keep_alive = PING

    def parse(self, raw: bytes, options: ServiceOptions) -> ParsedMessages:
        return parse_messages(raw, options)

    async def prepare(self, parsed: ParsedMessages, duet: Duet, owner: str) -> WireRequest:
        wire, given, _ = parsed
        return messages_request(wire, given, duet, owner, self.id_prefix, cache_marks(wire))

    def reasoning_output(self, configured: ReasoningOutput) -> ReasoningOutput:
        """Thinking blocks are where Anthropic's clients show reasoning: ``think`` (reasoning inside
        the text, for clients that read only text) becomes them too; ``hidden`` stays hidden."""
        return "hidden" if configured == "hidden" else "reasoning_content"

    def stream_writer(self, request: WireRequest, response_id: str) -> MessageStreamWriter:
        return MessageStreamWriter(response_id, request.model)

    def fold(self, request: WireRequest, response_id: str) -> MessageFold:
        return MessageFold(response_id, request.model)

    def error_response(self, error: APIError, headers: dict[str, str] | None = None) -> Response:
        return error_response(error, headers)


async def count_tokens(service: Service, request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the request validated as ``/v1/messages`` would validate it
    (a 400 or a 404 alike), then :func:`~duet.api.messages._tokens.estimate_input_tokens`. No model is called."""
    if not is_json(request.headers.get("content-type")):
        raise APIError(415, "the request body must be JSON, sent with 'Content-Type: application/json'", param="Content-Type")
    async with service.gate.body(request) as raw:
        if len(raw) > LARGE_BODY_BYTES:  # parsed in a worker thread, as the flow parses large bodies
            parsed = await asyncio.to_thread(parse_messages, raw, service.options, CountTokensRequest)
        else:
            parsed = parse_messages(raw, service.options, CountTokensRequest)
    service.pipeline(parsed.model)  # an unknown model is a 404 here too
    tokens = estimate_input_tokens(parsed.input.chat_messages, parsed.input.tools)
    return JSONResponse(CountTokensResponse(input_tokens=tokens).model_dump())

