"""``POST /v1/responses`` on the shared request flow, and ``GET /v1/responses/{id}``."""

from __future__ import annotations

import logging
from typing import Any, Mapping, NamedTuple

from duet.agents import Duet, DuetRequest, cache_marks_from_openai

from duet.api._errors import APIError
from duet.api._rendering import ResponseWriter
from duet.api._options import answer_options, tool_cache_marks
from duet.api._serving import WireProtocol, WireRequest, new_response_id, validated_body
from duet.api._settings import ServiceOptions
from duet.api.responses._protocol import ResponsesRequest
from duet.api.responses._reader import ClientTool, asked_options, conversation_of, messages_from_items, proxy_tools, read_tools
from duet.api.responses._store import ResponseStore
from duet.api.responses._writers import ResponseFold, ResponseStreamWriter, response_shell

logger = logging.getLogger(__name__)


class ParsedResponses(NamedTuple):
    request: ResponsesRequest
    body: dict[str, Any]
    chat_tools: list[dict[str, Any]]  # the tools as the answer model gets them
    client_tools: dict[str, ClientTool]  # what each is to the client, by the name the model sees

    model: str  # the pipeline it names


class Responses(WireProtocol[ParsedResponses]):
    """The OpenAI Responses API: ``response.*`` events (``: ping`` keep-alives; ``response.failed``
    after the stream began) or one ``response`` object; errors as OpenAI error bodies."""

    id_prefix = "resp_"

    def __init__(self, store: ResponseStore, *, refuse_when_store_down: bool = False) -> None:
        """``refuse_when_store_down`` (``store_outage: refuse``): while the store is known to be down, a
        request that asks to store gets 503 before any model call, not an answer that says ``store: false``."""
        self.store = store
        self.refuse_when_store_down = refuse_when_store_down

    def parse(self, raw: bytes, options: ServiceOptions) -> ParsedResponses:
        request, body = validated_body(raw, ResponsesRequest, (("input", options.max_messages), ("tools", options.max_tools)))
        if isinstance(request.input, str) and not request.input:
            raise APIError(400, "input: must not be empty", param="input", code="invalid_request")
        chat_tools, client_tools = read_tools(request.tools or [], options.max_tools)
        return ParsedResponses(request, body, chat_tools, client_tools, request.model)

    async def prepare(self, parsed: ParsedResponses, duet: Duet, owner: str) -> WireRequest:
        wire, body, chat_tools, client_tools, _ = parsed
        if wire.stored and self.refuse_when_store_down:
            await self.store.ensure_available()
        items, origins = await self._input_items(wire, body["input"], owner)
        messages, origins = messages_from_items(items, wire.instructions, origins)
        conversation = conversation_of(messages, origins)
        asked = asked_options(wire)
        asked.cache_marks = cache_marks_from_openai(messages) + tool_cache_marks(body.get("tools"))
        options, tools = answer_options(asked, proxy_tools(chat_tools), duet.service_tool_names)
        run_request = DuetRequest(conversation, tools, options, wire.user, owner, new_response_id(self.id_prefix))
        return WireRequest(run_request, wire.model, wire.stream, wire=wire,
                           state={"client_tools": client_tools, "items": items, "tools": body.get("tools") or []})

    async def _input_items(self, wire: ResponsesRequest, raw_input: Any, owner: str) -> tuple[list[Any], list[str]]:
        """The items the answer continues: those of the stored response it follows (``previous_response_id``),
        then its own input, each ``item_reference`` resolved; and where each came from (what a 400 names)."""
        earlier: list[dict[str, Any]] = []
        records: list[dict[str, Any]] = []  # stored responses read for this request: item references resolve from them first
        if wire.previous_response_id is not None:
            record = await self.store.response(owner, wire.previous_response_id)
            if record is None:
                raise not_found("previous_response_id", "response", wire.previous_response_id,
                                self.store.response_unsaved(owner, wire.previous_response_id), "previous_response_not_found")
            earlier = list(record["items"])
            records.append(record)
        items = [{"type": "message", "role": "user", "content": raw_input}] if isinstance(raw_input, str) else list(raw_input)
        origins = ["input"] if isinstance(raw_input, str) else [f"input[{index}]" for index in range(len(items))]
        for index, item in enumerate(items):
            if isinstance(item, Mapping) and item.get("type") == "item_reference":
                items[index] = await self._referenced(item, origins[index], owner, records)
        return earlier + items, ["previous_response_id"] * len(earlier) + origins

    async def _referenced(self, item: Mapping[str, Any], param: str, owner: str, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The item an ``item_reference`` names: from a stored response's output (or input)."""
        item_id = item.get("id")
        if not isinstance(item_id, str) or not item_id:
            raise APIError(400, f"{param}.id: required (the id of an item)", param=f"{param}.id", code="invalid_request")
        for record in records:
            found = _item(record, item_id)
            if found is not None:
                return found
        stored = await self.store.record_with_item(owner, item_id)
        found = _item(stored, item_id) if stored is not None else None
        if stored is None or found is None:
            raise not_found(f"{param}.id", "item", item_id, self.store.item_unsaved(owner, item_id), "item_not_found")
        records.append(stored)
        return found

    def _shell(self, request: WireRequest, response_id: str) -> Any:
        return response_shell(response_id, request.wire, request.state["tools"])

    def stream_writer(self, request: WireRequest, response_id: str) -> ResponseStreamWriter:
        return ResponseStreamWriter(self._shell(request, response_id), request.state["client_tools"])

    def fold(self, request: WireRequest, response_id: str) -> ResponseFold:
        return ResponseFold(self._shell(request, response_id), request.state["client_tools"])

    async def completed(self, request: WireRequest, writer: ResponseWriter) -> None:
        """Stores a finished response, then ends it: a response that could not be stored says ``store:
        false`` (in the body, in the stream's last event) and is named in the collected response's header."""
        assert isinstance(writer, ResponseFold)
        response = writer.response
        if request.wire.stored and response.status in ("completed", "incomplete"):
            body = response.model_dump(mode="json")
            if not await self.store.put(request.run_request.owner, body, request.state["items"] + body["output"]):
                response.store = False
                request.unsaved.append("response")
                logger.info("response %s was answered but not stored (the response store is unavailable): it says store: false",
                            response.id)
        writer.end()

    async def retrieve(self, response_id: str, owner: str) -> dict[str, Any]:
        """``GET /v1/responses/{id}``: ``owner``'s stored response, or 404."""
        record = await self.store.response(owner, response_id)
        if record is None:
            raise not_found("response_id", "response", response_id, self.store.response_unsaved(owner, response_id), "not_found")
        return record["response"]


def not_found(param: str, what: str, given_id: str, unsaved: bool, code: str) -> APIError:
    """The 404 of a stored response or item that is not there: what this process knows of it (it
    answered it while the store was down), else every reason it may be missing, none of them blamed."""
    if unsaved:
        message = (f"{param}: the {what} '{given_id[:100]}' was not stored: the response store was unavailable when it "
                   "was answered (that response said store: false); send the whole conversation as input")
    else:
        message = (f"{param}: no stored {what} '{given_id[:100]}' (never stored, stored with store: false, expired, or "
                   "not saved during a store outage)")
    return APIError(404, message, param=param, code=code)


def _item(record: dict[str, Any], item_id: str) -> dict[str, Any] | None:
    for item in reversed(record["items"]):
        if isinstance(item, Mapping) and item.get("id") == item_id:
            return dict(item)
    return None
