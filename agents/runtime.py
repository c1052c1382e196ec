"""The AutoGen runtime the served teams run on."""

from __future__ import annotations

import asyncio
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

    async def stop_after_handlers(self, timeout: float) -> None:
        """Stops the message loop of a run that was cancelled or failed, once its handlers have ended.

        The stock ``stop()`` replaces the message queue at once; a handler of the run that is still
        running then calls ``task_done()`` on the new queue when it ends, which raises, and asyncio
        logs "Task exception was never retrieved" for it. Here the handlers (whose run token is
        cancelled, so they end at their next await) get ``timeout`` seconds to end and are cancelled
        after that; the loop is stopped only when none runs and nothing is queued.
        """
        if self._run_context is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        handlers: set[asyncio.Task[Any]] = set()
        try:
            while True:
                running = set(self._background_tasks)
                queued = not self._message_queue.empty() and not self._run_context._run_task.done()
                handlers |= running
                left = deadline - loop.time()
                if not (running or queued) or left <= 0:
                    break
                if running:
                    await asyncio.wait(running, timeout=left)
                else:
                    await asyncio.sleep(0)  # a queued message: let the loop pick it up
            if running:  # handlers still going after ``timeout``: cancel them, and give them a moment to end
                for task in running:
                    task.cancel()
                await asyncio.wait(running, timeout=1.0)
        finally:
            for task in handlers:  # nobody reads these results; reading them keeps asyncio quiet
                if task.done() and not task.cancelled():
                    task.exception()
            # The loop re-raises the failure the run already reported; nothing new to log.
            with contextlib.suppress(BaseException):
                await self.stop()
