"""The app factory and the process around it, without HTTP: building and running an app changes
nothing outside it; the process settings are ``configure_process``'s, made once; the routes."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from typing import Any, Iterator

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Route

from duet.agents import AnswerSettings, PipelineSettings
from duet.api import ServiceConfig, configure_process, create_app, freeze_startup_objects
from duet.api.server._process import GC_THRESHOLDS
from duet.api._settings import ServiceOptions

FILTERED_LOGGERS = ("autogen_core", "uvicorn.error")
TRACING = "AUTOGEN_DISABLE_RUNTIME_TRACING"


def a_config() -> ServiceConfig:
    pipeline = PipelineSettings(name="duet", answer=AnswerSettings(base_url="http://127.0.0.1:9/v1", model="m"))
    return ServiceConfig([pipeline], options=ServiceOptions(state_url="memory://"))


def process_state() -> dict[str, Any]:
    return {
        "gc_thresholds": gc.get_threshold(),
        "gc_frozen": gc.get_freeze_count(),
        "filters": {name: list(logging.getLogger(name).filters) for name in FILTERED_LOGGERS},
        "tracing": os.environ.get(TRACING),
    }


@pytest.fixture
def process() -> Iterator[None]:
    """Puts back what a test changes of the process (this one is shared by the whole test run)."""
    thresholds = gc.get_threshold()
    filters = {name: list(logging.getLogger(name).filters) for name in FILTERED_LOGGERS}
    tracing = os.environ.get(TRACING)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        for name, kept in filters.items():
            logging.getLogger(name).filters[:] = kept
        if tracing is None:
            os.environ.pop(TRACING, None)
        else:
            os.environ[TRACING] = tracing


def test_building_and_running_apps_changes_nothing_outside_them(process: None) -> None:
    before = process_state()

    async def serve_briefly() -> None:
        for _ in range(3):
            app = create_app(a_config())
            async with app.router.lifespan_context(app):  # startup and shutdown, as a server runs them
                pass

    asyncio.run(serve_briefly())
    assert process_state() == before


def test_configure_process_sets_the_process_up_once(process: None) -> None:
    for name in FILTERED_LOGGERS:
        logging.getLogger(name).filters.clear()
    os.environ.pop(TRACING, None)
    configure_process()
    configure_process()  # idempotent: one filter per logger, however often it is called
    assert gc.get_threshold() == GC_THRESHOLDS
    assert os.environ[TRACING] == "true"
    assert all(len(logging.getLogger(name).filters) == 1 for name in FILTERED_LOGGERS)

    os.environ[TRACING] = "false"  # an operator who wants the runtime's spans keeps them
    configure_process()
    assert os.environ[TRACING] == "false"


def test_cancelled_runs_are_not_logged_as_errors(process: None) -> None:
    configure_process()
    logger = logging.getLogger("autogen_core")
    cancelled = logger.makeRecord("autogen_core", logging.ERROR, __file__, 1, "Error processing publish message", (),
                                  (asyncio.CancelledError, asyncio.CancelledError(), None))
    failed = logger.makeRecord("autogen_core", logging.ERROR, __file__, 1, "Error processing publish message", (),
                               (ValueError, ValueError("boom"), None))
    assert not logger.filter(cancelled) and logger.filter(failed)


def test_freeze_startup_objects(process: None) -> None:
    freeze_startup_objects()
    assert gc.get_freeze_count() > 10_000  # the modules and whatever was built before


def test_routes() -> None:
    app = create_app(a_config())
    routes = {(route.path, method): route for route in app.routes if isinstance(route, Route) for method in route.methods or ()}
    for prefix in ("/v1", ""):  # Dify appends /chat/completions to whatever base URL it was given
        hot = routes[(f"{prefix}/chat/completions", "POST")]
        assert not isinstance(hot, APIRoute)  # a plain Starlette endpoint: no dependency resolution per request
        assert isinstance(routes[(f"{prefix}/models", "GET")], APIRoute)
    assert {("/health", "GET"), ("/health/ready", "GET")} <= set(routes)
