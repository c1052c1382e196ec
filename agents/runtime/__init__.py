"""The AutoGen runtime Duet's served teams run on: :class:`LeanAgentRuntime`, a subclass of
autogen-core's ``SingleThreadedAgentRuntime`` without the work nobody asked for (event-log JSON,
no-op spans, INFO lines nobody logs, a trip through the queue per message), and the lighter queues
its teams use (:class:`HandOverQueue`, :func:`lighten_queue`)."""

from duet.agents.runtime._runtime import HandOverQueue, LeanAgentRuntime, lighten_queue

__all__ = ["HandOverQueue", "LeanAgentRuntime", "lighten_queue"]
