"""The HTTP surface: which path answers what. Routing only; the work is in :mod:`duet.api._serving`."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable, Mapping

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from duet.agents import Duet

from duet.api._auth import BearerAuth
from duet.api._errors import ErrorShape, as_api_error
from duet.api._health import Readiness
from duet.api._limits import RequestGate
from duet.api.messages import AnthropicMessages, count_tokens
from duet.api.chat import ChatCompletions
from duet.api._wire import ModelList
from duet.api.responses import Responses
from duet.api._serving import Service, WireProtocol

Endpoint = Callable[[Request], Awaitable[Response]]


def protocol_endpoint(protocol: WireProtocol[Any], auth: Callable[[Request], Awaitable[str]]) -> Endpoint:
    """The POST endpoint of ``protocol`` on the shared flow (``app.state.service``). A plain
    Starlette endpoint: the hottest routes skip FastAPI's dependency resolution."""

    async def endpoint(request: Request) -> Response:
        try:
            owner = await auth(request)  # whose stored state the request reads and writes
            return await request.app.state.service.create(request, protocol, owner)
        except Exception as exc:  # noqa: BLE001 - every failure is the protocol's error body (Starlette would log a traceback)
            return protocol.error_response(as_api_error(exc))

    return endpoint


def as_asgi(endpoint: Endpoint) -> ASGIApp:
    """``endpoint`` as a plain ASGI app (what Starlette's route does, without its exception wrapper:
    the protocol endpoints answer every failure themselves)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await endpoint(Request(scope, receive, send))
        await response(scope, receive, send)

    return app


def error_shapes() -> dict[str, ErrorShape]:
    """The error body of each protocol whose shape is not OpenAI's, by the path prefix it answers
    under (with and without ``/v1``): for unknown paths and methods there too."""
    anthropic = AnthropicMessages().error_response
    return {"/v1/messages": anthropic, "/messages": anthropic}


def add_routes(app: FastAPI, *, auth: BearerAuth, readiness: Readiness, gate: RequestGate, pipelines: Mapping[str, Duet],
               responses: Responses) -> dict[str, Endpoint]:
    """Chat completions, the Responses API, Anthropic Messages and the model list (under ``/v1`` and
    without it), ``/health`` and ``/health/ready``. The service itself is ``app.state.service``, set by
    the app's lifespan. Returns the POST endpoints of the completion protocols by path, which the app
    may serve directly."""
    anthropic = AnthropicMessages()
    chat_completions = protocol_endpoint(ChatCompletions(), auth)
    create_response = protocol_endpoint(responses, auth)
    messages = protocol_endpoint(anthropic, auth)
    retrieve_response = retrieve_endpoint(responses, auth)
    messages_count_tokens = count_tokens_endpoint(anthropic, auth)
    models = models_endpoint()
    # Dify appends "/chat/completions" to whatever base URL the user typed: answer with and without /v1.
    protocol_routes: dict[str, Endpoint] = {}
    for prefix in ("/v1", ""):
        shown = prefix == "/v1"  # in the API's schema once
        protocol_routes.update({f"{prefix}/chat/completions": chat_completions, f"{prefix}/responses": create_response,
                                f"{prefix}/messages": messages})
        app.add_route(f"{prefix}/chat/completions", chat_completions, methods=["POST"], include_in_schema=shown)
        app.add_route(f"{prefix}/responses", create_response, methods=["POST"], include_in_schema=shown)
        app.add_route(f"{prefix}/responses/{{response_id}}", retrieve_response, methods=["GET"], include_in_schema=shown)
        app.add_route(f"{prefix}/messages", messages, methods=["POST"], include_in_schema=shown)
        app.add_route(f"{prefix}/messages/count_tokens", messages_count_tokens, methods=["POST"], include_in_schema=shown)
        app.add_api_route(f"{prefix}/models", models, methods=["GET"], dependencies=[Depends(auth)], include_in_schema=shown)
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/health/ready", ready_endpoint(auth, readiness, gate, pipelines), methods=["GET"], response_model=None)
    return protocol_routes


def retrieve_endpoint(responses: Responses, auth: Callable[[Request], Awaitable[str]]) -> Endpoint:
    """``GET /v1/responses/{id}``: the key's stored response."""

    async def retrieve_response(request: Request) -> Response:
        try:
            owner = await auth(request)
            return JSONResponse(await responses.retrieve(request.path_params["response_id"], owner))
        except Exception as exc:  # noqa: BLE001 - every failure is the protocol's error body
            return responses.error_response(as_api_error(exc))

    return retrieve_response


def count_tokens_endpoint(anthropic: AnthropicMessages, auth: Callable[[Request], Awaitable[str]]) -> Endpoint:
    """``POST /v1/messages/count_tokens``, its errors in the Anthropic shape (as for ``/v1/messages``)."""

    async def messages_count_tokens(request: Request) -> Response:
        try:
            await auth(request)
            return await count_tokens(request.app.state.service, request)
        except Exception as exc:  # noqa: BLE001 - every failure is the protocol's error body
            return anthropic.error_response(as_api_error(exc))

    return messages_count_tokens


def models_endpoint() -> Callable[..., Awaitable[ModelList]]:
    """``GET /v1/models``: the pipelines served (a FastAPI route: its response model is in the API's schema)."""

    async def service(request: Request) -> Service:
        return request.app.state.service

    async def models(svc: Service = Depends(service)) -> ModelList:
        return svc.model_list()

    return models


async def health() -> dict[str, Any]:
    """Liveness: the process answers. Nothing about its insides (it needs no key)."""
    return {"status": "ok"}


def ready_endpoint(auth: BearerAuth, readiness: Readiness, gate: RequestGate,
                   pipelines: Mapping[str, Duet]) -> Callable[[Request], Awaitable[JSONResponse]]:
    """``/health/ready``: 503 while this replica should get no traffic."""

    async def ready(request: Request) -> JSONResponse:
        """Readiness: 503 while this replica should get no traffic. Which check failed, and the
        service's counters, only for a valid key (an open endpoint: only for clients on this machine)."""
        svc: Service | None = getattr(request.app.state, "service", None)
        is_ready, checks = await readiness.check("shutting down" if gate.draining else "ok" if svc is not None else "starting")
        body: dict[str, Any] = {"status": "ready" if is_ready else "not_ready"}
        if auth.may_see_details(request):
            body["checks"] = checks
            body["pipelines"] = list(pipelines)
            body["in_flight"] = svc.in_flight if svc is not None else 0
            body["tasks"] = len(asyncio.all_tasks())
            body["pid"] = os.getpid()  # which worker answered (duet serve --workers)
            body["mcp_servers"] = {name: status for name, duet in pipelines.items() if (status := duet.services.status())}
        return JSONResponse(body, status_code=200 if is_ready else 503)

    return ready
