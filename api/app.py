"""The FastAPI application: an app factory with a lifespan that owns the pipelines."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from duet.agents import Duet, PipelineSettings
from duet.agents.continuations import ContinuationStore, open_store
from duet.workbenches import stop_shared_servers

from .auth import BearerAuth
from .errors import as_api_error, install_error_handlers, install_secret_masking
from .health import Readiness
from .limits import RequestGate
from .serving import ChatCompletionsService
from .settings import ConfigFile, EnvSettings, ServiceOptions, TeamPipelineSettings

logger = logging.getLogger("duet")


class _DropCancellations(logging.Filter):
    """A client that hangs up cancels its run; AutoGen's runtime logs each cancelled handler as an
    error with a traceback. That is the service working as intended, not something to page about."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


class _WithoutTrailingSlash:
    """Answers ``/v1/chat/completions/`` as ``/v1/chat/completions`` (a redirect would lose the
    POST body with many clients), for every route, without a routing pass of its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if len(path) > 1 and path.endswith("/"):
            scope = {**scope, "path": path.rstrip("/") or "/"}
        await self.app(scope, receive, send)


@dataclass
class ServiceConfig:
    """What the app serves, resolved from the environment, a YAML file or a team file."""

    pipelines: list[PipelineSettings | TeamPipelineSettings]
    api_keys: list[str] = field(default_factory=list)
    options: ServiceOptions = field(default_factory=ServiceOptions)

    @property
    def ping_interval(self) -> float:
        return self.options.ping_interval

    @property
    def state_url(self) -> str:
        return self.options.state_url

    @classmethod
    def from_env(cls, env: EnvSettings | None = None) -> "ServiceConfig":
        env = env or EnvSettings()
        options = env.service_options()  # flags, then DUET_* variables, then the YAML file: resolved by EnvSettings
        if env.team is not None:
            pipelines: list[PipelineSettings | TeamPipelineSettings] = [
                TeamPipelineSettings(name=env.model_name, team_file=env.team, reasoning_output=env.reasoning_output)
            ]
            return cls(pipelines, env.keys, options)
        if env.config is not None:
            file = ConfigFile.load(env.config)
            return cls(list(file.pipelines), env.keys or file.api_keys, options)
        return cls([env.default_pipeline()], env.keys, options)

    def build(self, continuations: ContinuationStore) -> dict[str, Duet]:
        """Creates every pipeline (model clients, service tools, team files loaded and checked) once."""
        duets: dict[str, Duet] = {}
        for pipeline in self.pipelines:
            if isinstance(pipeline, TeamPipelineSettings):
                duets[pipeline.name] = Duet.from_team(pipeline.team_file, name=pipeline.name,
                                                      reasoning_output=pipeline.reasoning_output, continuations=continuations)
            else:
                duets[pipeline.name] = Duet.from_settings(pipeline, continuations=continuations)
        return duets


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """The service. Without ``config`` it is read from the environment (``DUET_*``).

    Pipelines are built here, so a broken team file or setting fails before a port is bound;
    their model clients open connections lazily, inside the server's event loop, and the
    lifespan closes them.
    """
    config = config or ServiceConfig.from_env()
    # The runtime's OpenTelemetry spans cost ~0.2 ms per request; opt back in by setting it to "false".
    os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
    logging.getLogger("autogen_core").addFilter(_DropCancellations())
    install_secret_masking(config.api_keys)  # and the upstream keys and header values the model clients register
    auth = BearerAuth(config.api_keys)
    options = config.options
    continuations = open_store(options.state_url, timeout=options.store_timeout)  # an unwritable SQLite path stops here
    pipelines = config.build(continuations)
    gate = RequestGate(options)
    readiness = Readiness(pipelines, continuations, options)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            for duet in pipelines.values():
                await duet.open()  # MCP servers start here; one that cannot start stops the service
            app.state.service = ChatCompletionsService(pipelines, options, gate)
            # Everything built so far lives as long as the service: keep the cyclic GC from walking
            # it again on every collection, and collect less often (a request allocates thousands of
            # short-lived objects; bench/: ~0.4 ms less CPU per request, same memory).
            gc.collect()
            gc.freeze()
            gc.set_threshold(20_000, 20, 20)
            if not auth.enabled:
                logger.warning("DUET_API_KEYS is empty: the endpoint accepts requests without an API key")
            logger.info("serving %s", ", ".join(pipelines))
            yield
        finally:
            await asyncio.gather(*(duet.close() for duet in pipelines.values()), return_exceptions=True)
            await stop_shared_servers()
            await continuations.close()

    # The API's schema and its pages describe the whole surface: served only when asked for.
    docs = {} if options.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="Duet", summary="A reasoning model and an answer model behind one OpenAI-compatible endpoint.",
                  lifespan=lifespan, redirect_slashes=False, **docs)
    app.state.gate = gate  # the server tells it when to drain and when to stop (api/server.py)
    install_error_handlers(app)
    if options.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=options.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type"], max_age=600)

    async def service(request: Request) -> ChatCompletionsService:
        return request.app.state.service  # type: ignore[no-any-return]

    async def chat_completions(request: Request) -> Response:
        # A plain Starlette endpoint: the hottest route skips FastAPI's dependency resolution.
        try:
            await auth(request)
            return await request.app.state.service.create(request)  # type: ignore[no-any-return]
        except Exception as exc:  # every failure is an OpenAI error body (Starlette would log a traceback)
            return as_api_error(exc).response()

    async def models(svc: ChatCompletionsService = Depends(service)) -> dict[str, Any]:
        return svc.model_list()

    async def health() -> dict[str, Any]:
        """Liveness: the process answers. Nothing about its insides (it needs no key)."""
        return {"status": "ok"}

    async def ready(request: Request) -> JSONResponse:
        """Readiness: 503 while this replica should get no traffic. Which check failed, and the
        service's counters, only for a valid key (an open endpoint: only for clients on this machine)."""
        svc: ChatCompletionsService | None = getattr(request.app.state, "service", None)
        is_ready, checks = await readiness.check("shutting down" if gate.draining else "ok" if svc is not None else "starting")
        body: dict[str, Any] = {"status": "ready" if is_ready else "not_ready"}
        if auth.may_see_details(request):
            body["checks"] = checks
            body["pipelines"] = list(pipelines)
            body["in_flight"] = svc.in_flight if svc is not None else 0
            body["tasks"] = len(asyncio.all_tasks())
            body["mcp_servers"] = {name: status for name, duet in pipelines.items() if (status := duet.services.status())}
        return JSONResponse(body, status_code=200 if is_ready else 503)

    # Dify appends "/chat/completions" to whatever base URL the user typed: answer with and without /v1.
    for prefix in ("/v1", ""):
        app.add_route(f"{prefix}/chat/completions", chat_completions, methods=["POST"], include_in_schema=prefix == "/v1")
        app.add_api_route(f"{prefix}/models", models, methods=["GET"], dependencies=[Depends(auth)], include_in_schema=prefix == "/v1")
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/health/ready", ready, methods=["GET"], response_model=None)
    app.add_middleware(_WithoutTrailingSlash)  # added last: runs first, before CORS and routing
    return app
