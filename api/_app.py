"""The FastAPI application: an app factory with a lifespan that owns the pipelines.

Process-wide settings (garbage collector, AutoGen's tracing, log filters) are not the app's:
:mod:`duet.api.server._process` has them, and ``duet serve`` makes them. The one process-wide thing an app
does is add the secrets it is configured with (API keys, upstream keys and header values) to the
masking of every log line and error message, which log records, being process-wide, need
(idempotent: the masking is installed once).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from duet.agents import Duet, PipelineSettings
from duet.agents.continuations import ContinuationStore, open_store
from duet.workbenches import stop_shared_servers

from duet.api._auth import BearerAuth
from duet.api._errors import install_error_handlers, install_secret_masking
from duet.api._health import Readiness
from duet.api._limits import RequestGate
from duet.api.responses import Responses, ResponseStore
from duet.api.observability import Observability, ObservedRequests, WorkerSampler, add_metrics_route, flush_traces
from duet.api._openapi import add_protocol_paths
from duet.api._routes import add_routes, as_asgi, error_shapes
from duet.api._serving import UNSAVED_HEADER, Service
from duet.api._settings import ConfigError, ConfigFile, EnvSettings, ServiceOptions, TeamPipelineSettings

logger = logging.getLogger("duet")

TRACE_FLUSH_SECONDS = 2.0  # the spans of the last requests, sent as the app stops (a collector that is down costs this much)


def _without_trailing_slash(scope: Scope) -> Scope:
    """``/v1/chat/completions/`` is answered as ``/v1/chat/completions`` (a redirect would lose the
    POST body with many clients), for every route, without a routing pass of its own."""
    path = scope.get("path", "")
    if len(path) > 1 and path.endswith("/"):
        return {**scope, "path": path.rstrip("/") or "/"}
    return scope


class _WithoutTrailingSlash:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(_without_trailing_slash(scope), receive, send)


class DuetApp(FastAPI):
    """The FastAPI app, with a short way in for the hot routes: a POST to a completion protocol goes
    straight to its observed endpoint (:meth:`serve_directly`), past FastAPI's and Starlette's layers
    (error pages, FastAPI's telemetry and body-limit checks, exception handlers, the router), which
    those endpoints do not use: they answer every failure in their protocol's shape themselves.
    Everything else takes the whole stack."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._direct: dict[str, ASGIApp] = {}

    def openapi(self) -> dict[str, Any]:
        """FastAPI's document, with the protocol routes it cannot see (plain Starlette routes); made once."""
        if self.openapi_schema is None:
            self.openapi_schema = add_protocol_paths(super().openapi())
        return self.openapi_schema

    def serve_directly(self, path: str, app: ASGIApp) -> None:
        """POSTs to ``path`` (with or without a trailing slash) go to ``app`` alone."""
        self._direct[path] = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and self._direct:
            scope = _without_trailing_slash(scope)
            direct = self._direct.get(scope["path"])
            if direct is not None:
                scope["app"] = self  # what Request.app reads, as Starlette sets it
                if self.root_path:
                    scope["root_path"] = self.root_path
                await direct(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


@dataclass
class ServiceConfig:
    """What the app serves, resolved from the environment, a YAML file or a team file."""

    pipelines: list[PipelineSettings | TeamPipelineSettings]
    api_keys: list[str] = field(default_factory=list)
    options: ServiceOptions = field(default_factory=ServiceOptions)
    source: str = ""
    """Where the pipelines are set, for error messages: the YAML file, or empty (the ``DUET_*`` variables)."""
    function_tools: str = ""
    """``DUET_FUNCTION_TOOLS`` as given, when the variables describe the pipeline."""

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
            return cls(list(file.pipelines), env.keys or file.api_keys, options, source=str(env.config))
        return cls([env.default_pipeline()], env.keys, options, function_tools=env.function_tools)

    def build(self, continuations: ContinuationStore) -> dict[str, Duet]:
        """Creates every pipeline (model clients, service tools, team files loaded and checked) once.
        Raises :class:`ConfigError` naming the pipeline and where it is set."""
        duets: dict[str, Duet] = {}
        for pipeline in self.pipelines:
            try:
                if isinstance(pipeline, TeamPipelineSettings):
                    duets[pipeline.name] = Duet.from_team(pipeline.team_file, name=pipeline.name,
                                                          reasoning_output=pipeline.reasoning_output, continuations=continuations,
                                                          reuse_seconds=self.options.reasoning_reuse_seconds)
                else:
                    duets[pipeline.name] = Duet.from_settings(pipeline, continuations=continuations,
                                                              reuse_seconds=self.options.reasoning_reuse_seconds)
            except Exception as exc:  # a function tool that does not import, a broken team file
                raise ConfigError(f"{self.origin_of(pipeline)}: {exc}") from exc
        return duets

    def origin_of(self, pipeline: PipelineSettings | TeamPipelineSettings) -> str:
        """Where ``pipeline`` is set, to begin an error message with: the file and the pipeline, or the variable."""
        if self.source:
            return f"{self.source}: pipeline {pipeline.name!r}"
        if self.function_tools:  # the one thing the variables' pipeline imports
            return f"DUET_FUNCTION_TOOLS={self.function_tools}"
        return f"pipeline {pipeline.name!r}"


def _check_aliases(options: ServiceOptions, pipelines: dict[str, Duet]) -> None:
    """Every ``model_aliases`` entry names a pipeline that is served."""
    unknown = {alias: name for alias, name in options.model_aliases.items() if name not in pipelines}
    if unknown:
        alias, name = next(iter(unknown.items()))
        raise ValueError(f"model_aliases: '{alias}' names the pipeline '{name}', which is not served (served: {', '.join(pipelines)})")


def _lifespan(pipelines: dict[str, Duet], continuations: ContinuationStore, options: ServiceOptions, gate: RequestGate, *,
              auth_enabled: bool, observability: Observability) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the pipelines opened (their MCP servers started) and the service made; at the
    end the pipelines, the shared MCP servers and the store closed, and the last spans sent."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sampler = None
        try:
            for duet in pipelines.values():
                await duet.open()  # MCP servers start here; one that cannot start stops the service
            app.state.service = service = Service(pipelines, options, gate)
            if observability.metrics is not None:
                sampler = WorkerSampler(observability.metrics, gate, continuations, lambda: service.in_flight)
                sampler.start()
            if not auth_enabled:
                logger.warning("DUET_API_KEYS is empty: the endpoint accepts requests without an API key")
            logger.info("serving %s", ", ".join(pipelines))
            yield
        finally:
            if sampler is not None:
                await sampler.stop()
            await asyncio.gather(*(duet.close() for duet in pipelines.values()), return_exceptions=True)
            await stop_shared_servers()
            await continuations.close()
            await asyncio.to_thread(flush_traces, TRACE_FLUSH_SECONDS)

    return lifespan


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """The service. Without ``config`` it is read from the environment (``DUET_*``).

    Pipelines are built here, so a broken team file or setting fails before a port is bound;
    their model clients open connections lazily, inside the server's event loop, and the
    lifespan closes them.
    """
    config = config or ServiceConfig.from_env()
    install_secret_masking(config.api_keys)  # and the upstream keys and header values the model clients register
    auth = BearerAuth(config.api_keys, shared_state=config.options.state_scope == "shared")
    options = config.options
    continuations = open_store(options.state_url, timeout=options.store_timeout, failover_wait=options.store_failover_wait)  # an unwritable SQLite path stops here
    pipelines = config.build(continuations)
    _check_aliases(options, pipelines)
    gate = RequestGate(options)
    readiness = Readiness(pipelines, continuations, options)
    observability = Observability(options.metrics)
    lifespan = _lifespan(pipelines, continuations, options, gate, auth_enabled=auth.enabled, observability=observability)
    # The API's schema and its pages describe the whole surface: served only when asked for.
    docs = {} if options.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = DuetApp(title="Duet", summary="A reasoning model and an answer model behind one OpenAI-compatible endpoint.",
                  lifespan=lifespan, redirect_slashes=False, **docs)
    app.state.gate = gate  # the server tells it when to drain and when to stop (api/server/_server.py)
    install_error_handlers(app, error_shapes())
    if options.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=options.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type", "x-api-key", "anthropic-version", "anthropic-beta"],
                           expose_headers=[UNSAVED_HEADER], max_age=600)

    protocol_routes = add_routes(app, auth=auth, readiness=readiness, gate=gate, pipelines=pipelines,
                                 responses=Responses(ResponseStore(continuations), refuse_when_store_down=options.store_outage == "refuse"))
    if options.metrics:
        add_metrics_route(app, auth, options.metrics_open)
    app.add_middleware(ObservedRequests, hub=observability)  # request ids, metrics, spans, the log line
    app.add_middleware(_WithoutTrailingSlash)  # added last: runs first, before CORS and routing
    if not options.cors_origins:  # CORS answers preflights and adds headers: with it, every request takes the whole stack
        for path, endpoint in protocol_routes.items():
            app.serve_directly(path, ObservedRequests(as_asgi(endpoint), hub=observability))
    return app
