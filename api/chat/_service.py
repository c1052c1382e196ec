"""Chat Completions (``/v1/chat/completions``) on the shared request flow: its reader (an OpenAI
request → :mod:`duet.api.chat._reader`) and its writers (chunks, or one ``chat.completion``)."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from duet.agents import Duet

from duet.api.chat._fold import CompletionFold
from duet.api.chat._protocol import ChatCompletionRequest
from duet.api.chat._reader import chat_request
from duet.api.chat._stream import ChunkEncoder, ChunkWriter
from duet.api._serving import WireProtocol, WireRequest, validated_body
from duet.api._settings import ServiceOptions


class ParsedChat(NamedTuple):
    """A validated request and its body as parsed (the tool schemas are passed on from the body)."""

    request: ChatCompletionRequest
    body: dict[str, Any]
    model: str  # the pipeline it names


def parse_chat(raw: bytes, options: ServiceOptions) -> ParsedChat:
    """The validated request, and the body as parsed (tool schemas are passed on from it, untouched).
    Everything that can be refused without a model is refused here, with a 400 naming the param."""
    limits = (("messages", options.max_messages), ("tools", options.max_tools), ("functions", options.max_tools))
    request, body = validated_body(raw, ChatCompletionRequest, limits)
    return ParsedChat(request, body, request.model)


class ChatCompletions(WireProtocol[ParsedChat]):
    """``/v1/chat/completions``: OpenAI chunks (``: ping`` keep-alives, a ``data: {"error": …}``
    event after the stream began) or one ``chat.completion``; errors as OpenAI error bodies."""

    id_prefix = "chatcmpl-"

    def parse(self, raw: bytes, options: ServiceOptions) -> ParsedChat:
        return parse_chat(raw, options)

    async def prepare(self, parsed: ParsedChat, duet: Duet, owner: str) -> WireRequest:
        wire, body, _ = parsed
        return chat_request(wire, body, duet, owner, self.id_prefix)

    def stream_writer(self, request: WireRequest, response_id: str) -> ChunkWriter:
        return ChunkWriter(ChunkEncoder(response_id, int(time.time()), request.model), request.state["include_usage"])

    def fold(self, request: WireRequest, response_id: str) -> CompletionFold:
        return CompletionFold(response_id, int(time.time()), request.model)
