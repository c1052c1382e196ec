"""The AutoGen runtime the served teams run on."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator

from autogen_core import EVENT_LOGGER_NAME, SingleThreadedAgentRuntime

_event_logger = logging.getLogger(EVENT_LOGGER_NAME)


class _NoSpans:
    """Stands in for the runtime's trace helper when runtime tracing is disabled."""

    @contextlib.contextmanager
    def trace_block(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        yield None


class LeanAgentRuntime(SingleThreadedAgentRuntime):
    """``SingleThreadedAgentRuntime`` without the work nobody asked for.

    For every message it delivers, the stock runtime serialises the message to JSON for its event
    logger (even with no handler attached) and opens OpenTelemetry spans (no-op spans when
    ``AUTOGEN_DISABLE_RUNTIME_TRACING=true``, but still built). A two-agent team run sends about a
    dozen messages; skipping both halves the team's CPU time per request (``bench/``). The event
    log is still written when a handler listens at INFO, and spans are still opened unless
    runtime tracing is disabled. Relies on autogen-core 0.7.5 internals (pinned).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if os.environ.get("AUTOGEN_DISABLE_RUNTIME_TRACING") == "true":
            self._tracer_helper = _NoSpans()  # type: ignore[assignment]

    def _try_serialize(self, message: Any) -> str:
        if not _event_logger.isEnabledFor(logging.INFO):
            return ""
        return super()._try_serialize(message)
