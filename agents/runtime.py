"""The AutoGen runtime the served teams run on."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import uuid
from typing import Any, Iterator

from autogen_core import EVENT_LOGGER_NAME, ROOT_LOGGER_NAME, AgentId, CancellationToken, SingleThreadedAgentRuntime, TopicId
from autogen_core._single_threaded_agent_runtime import PublishMessageEnvelope, SendMessageEnvelope
from autogen_core._telemetry import get_telemetry_envelope_metadata
from autogen_core.logging import DeliveryStage, MessageEvent, MessageKind

_logger = logging.getLogger(ROOT_LOGGER_NAME)  # where the stock runtime writes its INFO lines
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
    dozen messages; skipping both halves the team's CPU time per request (``bench/``). And for every
    message sent or published it formats an INFO line with an f-string, the ``repr`` of the whole
    message (the conversation, in Duet's task), before the logger decides to drop it: that is
    skipped too unless the ``autogen_core`` logger is enabled for INFO (a 200-message conversation
    spent a fifth of its CPU there). The event log is still written when a handler listens at INFO,
    the INFO lines still formatted when INFO is enabled, and spans still opened unless runtime
    tracing is disabled. Message ids are unique and UUID-shaped as AutoGen asks, but counted from
    a random base per runtime instead of drawn from the OS for each message (``uuid4``).
    Relies on autogen-core 0.7.5 internals (pinned).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._message_id_base = str(uuid.uuid4())[:24]  # "xxxxxxxx-xxxx-4xxx-yxxx-": a version-4 UUID's head
        self._message_count = itertools.count()
        if os.environ.get("AUTOGEN_DISABLE_RUNTIME_TRACING") == "true":
            self._tracer_helper = _NoSpans()  # type: ignore[assignment]

    def _try_serialize(self, message: Any) -> str:
        if not _event_logger.isEnabledFor(logging.INFO):
            return ""
        return super()._try_serialize(message)

    def _new_message_id(self) -> str:
        return f"{self._message_id_base}{next(self._message_count):012x}"

    async def send_message(
        self,
        message: Any,
        recipient: AgentId,
        *,
        sender: AgentId | None = None,
        cancellation_token: CancellationToken | None = None,
        message_id: str | None = None,
    ) -> Any:
        if message_id is None:
            message_id = self._new_message_id()
        if _logger.isEnabledFor(logging.INFO):
            return await super().send_message(
                message, recipient, sender=sender, cancellation_token=cancellation_token, message_id=message_id
            )
        # Mirrors SingleThreadedAgentRuntime.send_message of autogen-core 0.7.5 (pinned), without the
        # INFO line nobody logs.
        if cancellation_token is None:
            cancellation_token = CancellationToken()
        if _event_logger.isEnabledFor(logging.INFO):
            _event_logger.info(
                MessageEvent(
                    payload=self._try_serialize(message),
                    sender=sender,
                    receiver=recipient,
                    kind=MessageKind.DIRECT,
                    delivery_stage=DeliveryStage.SEND,
                )
            )
        with self._tracer_helper.trace_block(
            "create", recipient, parent=None, extraAttributes={"message_type": type(message).__name__}
        ):
            future = asyncio.get_event_loop().create_future()
            if recipient.type not in self._known_agent_names:
                future.set_exception(Exception("Recipient not found"))
                return await future
            await self._message_queue.put(
                SendMessageEnvelope(
                    message=message,
                    recipient=recipient,
                    future=future,
                    cancellation_token=cancellation_token,
                    sender=sender,
                    metadata=get_telemetry_envelope_metadata(),
                    message_id=message_id,
                )
            )
            cancellation_token.link_future(future)
            return await future

    async def publish_message(
        self,
        message: Any,
        topic_id: TopicId,
        *,
        sender: AgentId | None = None,
        cancellation_token: CancellationToken | None = None,
        message_id: str | None = None,
    ) -> None:
        if message_id is None:
            message_id = self._new_message_id()
        if _logger.isEnabledFor(logging.INFO):
            return await super().publish_message(
                message, topic_id, sender=sender, cancellation_token=cancellation_token, message_id=message_id
            )
        # Mirrors SingleThreadedAgentRuntime.publish_message of autogen-core 0.7.5 (pinned), without
        # the INFO line nobody logs.
        with self._tracer_helper.trace_block(
            "create", topic_id, parent=None, extraAttributes={"message_type": type(message).__name__}
        ):
            if cancellation_token is None:
                cancellation_token = CancellationToken()
            if _event_logger.isEnabledFor(logging.INFO):
                _event_logger.info(
                    MessageEvent(
                        payload=self._try_serialize(message),
                        sender=sender,
                        receiver=topic_id,
                        kind=MessageKind.PUBLISH,
                        delivery_stage=DeliveryStage.SEND,
                    )
                )
            await self._message_queue.put(
                PublishMessageEnvelope(
                    message=message,
                    cancellation_token=cancellation_token,
                    sender=sender,
                    topic_id=topic_id,
                    metadata=get_telemetry_envelope_metadata(),
                    message_id=message_id,
                )
            )

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
