"""Settings of the whole process that serves Duet, made by ``duet serve``, not by ``create_app``
(a process may build many apps, as the tests do; an app changes nothing outside itself).

``duet serve`` calls :func:`configure_process` once before it builds the app, and its server
calls :func:`freeze_startup_objects` once the app has started (its lifespan has opened the
pipelines). A program that serves ``create_app`` itself calls them the same way to run as
``duet serve`` does.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import warnings

from duet.agents.pipeline import OldTeamFileWarning

from duet.api._sse import QuietAbandonedResponses

GC_THRESHOLDS = (20_000, 20, 20)
"""A request allocates thousands of short-lived objects: collect the youngest generation less often
(bench/: ~0.4 ms less CPU per request, same memory)."""


class DropCancellations(logging.Filter):
    """A client that hangs up cancels its run; AutoGen's runtime logs each cancelled handler as an
    error with a traceback. That is the service working as intended, not something to page about."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


def _add_filter_once(logger: logging.Logger, kind: type[logging.Filter]) -> None:
    if not any(isinstance(existing, kind) for existing in logger.filters):
        logger.addFilter(kind())


def configure_process() -> None:
    """Sets what serving Duet needs of the process; call it before the app is built. Idempotent.

    - AutoGen's runtime tracing off (``AUTOGEN_DISABLE_RUNTIME_TRACING=true``) unless the
      environment says otherwise: its OpenTelemetry spans cost ~0.2 ms per request; set it to
      ``false`` to have them;
    - log filters: no traceback for a run cancelled by a hang-up (``autogen_core``), no error for a
      response given up on a client that stopped reading (``uvicorn.error``; Duet logs a warning);
    - the cyclic garbage collector's thresholds (:data:`GC_THRESHOLDS`).
    """
    os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")
    _add_filter_once(logging.getLogger("autogen_core"), DropCancellations)
    _add_filter_once(logging.getLogger("uvicorn.error"), QuietAbandonedResponses)
    gc.set_threshold(*GC_THRESHOLDS)


def freeze_startup_objects() -> None:
    """Keeps the cyclic garbage collector from walking, at every collection, what exists now and
    lives as long as the process (modules, the app, its pipelines and what their startup opened).
    Call it once the app has started, before it serves; ``gc.unfreeze()`` undoes it."""
    gc.collect()
    gc.freeze()


def start_process(log_level: str, log_format: str = "text", worker: bool = False) -> None:
    """What a process that serves Duet sets before it builds the app (``duet serve`` and each of its
    workers): logging (Python warnings as log lines; a worker leaves an old team file's to the process
    that started it), these process settings, tracing."""
    from duet.api.observability import configure_logging, configure_tracing

    configure_logging(log_level, log_format, worker)  # type: ignore[arg-type]
    if worker:  # the process that starts the workers built the app first, and said it
        warnings.filterwarnings("ignore", category=OldTeamFileWarning)
    configure_process()
    configure_tracing()  # raises for OTEL_* settings it cannot honour
