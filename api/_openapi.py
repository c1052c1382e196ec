"""The OpenAPI description of the protocol routes, built from their wire models.

The completion routes are plain Starlette routes (they skip FastAPI's dependency resolution on the
hot path), so FastAPI does not describe them: :func:`add_protocol_paths` adds them to the document
FastAPI made, from the same pydantic models the readers validate with and the writers write
(:mod:`duet.api.chat._protocol`, :mod:`duet.api.responses._protocol`, :mod:`duet.api.messages._protocol`).
It runs once, when ``/openapi.json`` is first asked for (only with ``docs`` on): nothing on a request's path.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from duet.api import _wire as wire
from duet.api.chat import _protocol as chat
from duet.api.messages import _protocol as messages
from duet.api.responses import _protocol as responses

_REF = "#/components/schemas/{model}"
# Wire models of the same name in two protocols: pydantic names them by module; the document names them by protocol.
_QUALIFIED = {"duet__api__protocol__": "OpenAI", "duet__api__responses__protocol__": "Responses",
              "duet__api__messages__protocol__": "Anthropic"}

_ERROR_STATUSES = {
    "400": "The request is invalid (the message names the param); no model was called. An upstream's refusal of the request, too.",
    "401": "No API key, or one this server does not know.",
    "404": "An unknown model (pipeline), stored response or route.",
    "408": "The body did not arrive within body_timeout.",
    "413": "The body is larger than max_body_bytes.",
    "415": "The body is not sent as application/json.",
    "429": "The upstream's rate limit (its Retry-After passed on).",
    "500": "A bug in Duet (details in the server log).",
    "502": "The upstream failed, broke off or answered garbage.",
    "503": "Duet at its concurrency limit or shutting down, or the upstream unreachable (Retry-After).",
    "504": "The upstream was silent past its read timeout.",
}
_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {"x-api-key": []}]


def _components() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The JSON schemas of every wire model, and a ``$ref`` to each by ``(model, mode)``."""
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (chat.ChatCompletionRequest, "validation"), (chat.ChatCompletion, "serialization"),
        (chat.ChatCompletionChunk, "serialization"), (wire.ErrorBody, "serialization"), (wire.ModelList, "serialization"),
        (responses.ResponsesRequest, "validation"), (responses.Response, "serialization"),
        *((item, "serialization") for item in (responses.ReasoningItem, responses.MessageItem, responses.FunctionCallItem,
                                                responses.CustomToolCallItem)),
        (messages.MessagesRequest, "validation"), (messages.CountTokensRequest, "validation"),
        (messages.Message, "serialization"), (messages.CountTokensResponse, "serialization"),
        (messages.ErrorBody, "serialization"),
    ]
    refs, defs = models_json_schema(models, ref_template=_REF)
    text = json.dumps({"refs": {f"{model.__module__}.{model.__qualname__}": ref for (model, _), ref in refs.items()},
                       "defs": defs.get("$defs", {})})
    for qualified, name in _QUALIFIED.items():
        text = text.replace(qualified, name)
    renamed = json.loads(text)
    return renamed["defs"], renamed["refs"]


def _json(ref: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": ref}}


def _errors(error: dict[str, Any], statuses: tuple[str, ...] = tuple(_ERROR_STATUSES)) -> dict[str, Any]:
    return {status: {"description": _ERROR_STATUSES[status], "content": _json(error)} for status in statuses}


RESPONSES_EVENTS = [
    "response.created", "response.in_progress", "response.output_item.added", "response.output_item.done",
    "response.reasoning_summary_part.added", "response.reasoning_summary_part.done", "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done", "response.content_part.added", "response.content_part.done",
    "response.output_text.delta", "response.output_text.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
    "response.completed", "response.incomplete", "response.failed",
]
MESSAGES_EVENTS = ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop",
                   "ping", "error"]


def _json_text(schema: dict[str, Any]) -> dict[str, Any]:
    """An event's ``data``: JSON text, and the schema of the JSON."""
    return {"type": "string", "contentMediaType": "application/json", "contentSchema": schema}


def _stream(description: str, event: dict[str, Any]) -> dict[str, Any]:
    """A ``text/event-stream`` answer whose ``schema`` is each event's (``event``, ``data``, ``id``),
    as tools read it before OpenAPI 3.2's ``itemSchema``."""
    return {"text/event-stream": {"schema": {"description": description, **event}}}


def _chat_event(chunk: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
    data = {"if": {"const": "[DONE]"}, "then": True, "else": _json_text({"anyOf": [chunk, error]})}
    return {"type": "object", "required": ["data"], "properties": {"event": {"const": "message"}, "data": data}}


def _named_event(names: list[str], data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["event", "data"], "properties": {"event": {"enum": names}, "data": _json_text(data)}}


def _post(summary: str, request: dict[str, Any], answer: dict[str, Any], stream: dict[str, Any] | None,
          error: dict[str, Any]) -> dict[str, Any]:
    content = {**_json(answer), **(stream or {})}
    return {"post": {
        "summary": summary,
        "security": _SECURITY,
        "requestBody": {"required": True, "content": _json(request)},
        "responses": {"200": {"description": "The answer (a stream with \"stream\": true)." if stream else "The answer.",
                              "content": content}, **_errors(error)},
    }}


def protocol_paths(refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The path items of the protocol routes (the ``/v1`` ones; each is served without ``/v1`` too)."""
    def ref(model: type[BaseModel]) -> dict[str, Any]:
        return refs[f"{model.__module__}.{model.__qualname__}"]

    openai_error, anthropic_error = ref(wire.ErrorBody), ref(messages.ErrorBody)
    items = [ref(item) for item in (responses.ReasoningItem, responses.MessageItem, responses.FunctionCallItem, responses.CustomToolCallItem)]
    responses_event = _named_event(RESPONSES_EVENTS, {
        "type": "object", "required": ["type", "sequence_number"],
        "properties": {"type": {"enum": RESPONSES_EVENTS}, "sequence_number": {"type": "integer", "minimum": 0},
                       "response": ref(responses.Response), "item": {"anyOf": items}, "output_index": {"type": "integer", "minimum": 0},
                       "item_id": {"type": "string"}, "delta": {"type": "string"}, "text": {"type": "string"}}})
    messages_event = _named_event(MESSAGES_EVENTS, {
        "type": "object", "required": ["type"],
        "properties": {"type": {"enum": MESSAGES_EVENTS}, "message": ref(messages.Message), "index": {"type": "integer", "minimum": 0},
                       "error": {"$ref": _REF.format(model="AnthropicErrorDetail")}}})
    return {
        "/v1/chat/completions": _post(
            "OpenAI Chat Completions", ref(chat.ChatCompletionRequest), ref(chat.ChatCompletion),
            _stream("`data: {chat.completion.chunk}` events, `: ping` keep-alives, `data: [DONE]`; after the stream began, an "
                    "error is one `data: {\"error\": …}` event.", _chat_event(ref(chat.ChatCompletionChunk), openai_error)), openai_error),
        "/v1/responses": _post(
            "OpenAI Responses", ref(responses.ResponsesRequest), ref(responses.Response),
            _stream("`event: response.*` events with `sequence_number`, `: ping` keep-alives; after the stream began, an error "
                    "is one `response.failed` event.", responses_event), openai_error),
        "/v1/responses/{response_id}": {"get": {
            "summary": "A stored response",
            "security": _SECURITY,
            "parameters": [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "The stored response.", "content": _json(ref(responses.Response))},
                          **_errors(openai_error, ("401", "404", "500", "503"))},
        }},
        "/v1/messages": _post(
            "Anthropic Messages", ref(messages.MessagesRequest), ref(messages.Message),
            _stream("Named events (`message_start`, `content_block_*`, `message_delta`, `message_stop`), `event: ping` "
                    "keep-alives; after the stream began, an error is one `event: error`.", messages_event), anthropic_error),
        "/v1/messages/count_tokens": _post(
            "Anthropic token count (an estimate; no model is called)", ref(messages.CountTokensRequest),
            ref(messages.CountTokensResponse), None, anthropic_error),
        "/v1/models": {"get": {
            "summary": "The served pipelines, as models",
            "security": _SECURITY,
            "responses": {"200": {"description": "The model list.", "content": _json(ref(wire.ModelList))},
                          **_errors(openai_error, ("401", "500"))},
        }},
    }


def add_protocol_paths(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (FastAPI's) with the protocol routes, their wire models and the API key schemes."""
    schemas, refs = _components()
    components = document.setdefault("components", {})
    components.setdefault("schemas", {}).update(schemas)
    components.setdefault("securitySchemes", {}).update({
        "bearer": {"type": "http", "scheme": "bearer", "description": "One of DUET_API_KEYS (none needed when it is empty)."},
        "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": "The same key, as Anthropic's clients send it."},
    })
    document.setdefault("paths", {}).update(protocol_paths(refs))
    return document
