"""The HTTP side: the middleware that watches each request, and ``GET /metrics``."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from duet.api._auth import BearerAuth
from duet.api._errors import APIError
from duet.api.observability._logs import request_id_from, reset_request_id, set_request_id
from duet.api.observability._metrics import CONTENT_TYPE, exposition
from duet.api.observability._requests import Observability, RequestObservation, _current
from duet.api.observability._tracing import incoming_trace

UNWATCHED_PATHS = frozenset({"/health", "/health/ready", "/metrics"})
"""Probes and scrapes: neither counted nor logged (they would drown the requests)."""

_PROTOCOLS = (("/chat/completions", "chat.completions"), ("/responses", "responses"), ("/messages", "messages"),
              ("/models", "models"))


def protocol_of(path: str) -> str:
    """The API a path belongs to, as the ``protocol`` label (a fixed set: user paths never become labels)."""
    for suffix, protocol in _PROTOCOLS:
        if path.endswith(suffix):
            return protocol
    return "other"


class ObservedRequests:
    """Pure ASGI: gives each request its id (``X-Request-ID``: the client's if usable, else new; sent
    back on the response and bound to every log line of the request) and a
    :class:`~duet.api.observability._requests.RequestObservation`, finished once the response is."""

    def __init__(self, app: ASGIApp, hub: Observability) -> None:
        self.app = app
        self.hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNWATCHED_PATHS:
            await self.app(scope, receive, send)
            return
        given_id = traceparent = tracestate = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                given_id = value
            elif name == b"traceparent":
                traceparent = value.decode("latin-1")
            elif name == b"tracestate":
                tracestate = value.decode("latin-1")
        request_id = request_id_from(given_id)
        path = scope["path"]
        observation = RequestObservation(self.hub, request_id, scope["method"], path, protocol_of(path),
                                         incoming_trace(traceparent, tracestate))
        id_header = (b"x-request-id", request_id.encode("ascii"))
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        id_token = set_request_id(request_id, observation.trace_id)
        token = _current.set(observation)
        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            status = status or 500
            raise
        finally:
            # No status: nobody was answered (the client left first).
            observation.finish(status or 499)
            _current.reset(token)
            reset_request_id(id_token)


def add_metrics_route(app: FastAPI, auth: BearerAuth, open_to_all: bool) -> None:
    """``GET /metrics``: with API keys, for a valid key; on an open endpoint, for clients on this
    machine; for anyone with ``open_to_all`` (``DUET_METRICS_OPEN``)."""

    async def metrics(request: Request) -> Response:
        if not open_to_all and not auth.may_see_details(request):
            if auth.enabled:
                await auth(request)  # the 401 every other route gives
            raise APIError(403, "/metrics of an endpoint without API keys is for clients on this machine: "
                           "set DUET_API_KEYS, or DUET_METRICS_OPEN=true to let any client read it", code="forbidden")
        body = await asyncio.to_thread(exposition)  # with workers, reads every worker's file
        return Response(body, media_type=CONTENT_TYPE)

    app.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False)
