"""The AutoGen runtime Duet's served teams run on: :class:`LeanAgentRuntime`, a subclass of
autogen-core's ``SingleThreadedAgentRuntime`` without the work nobody asked for (event-log JSON,
no-op spans, INFO lines nobody logs, a trip through the queue per message), and the lighter queues
its teams use (:class:`HandOverQueue`, :func:`lighten_queue`), and the view of a runtime through which
Duet's team registers its agents (:class:`TeamRegistration`), and :func:`noted_at_once`: the messages an
agent class only notes down, which the runtime then hands it in their publisher's step. Nothing here changes AutoGen's own
modules: what is lighter applies to what runs on this runtime, and to Duet's teams.

Private modules, by concept: ``_runtime`` (the runtime), ``_loop`` (its message loop: run context and
message queue), ``_agents`` (the agents it makes and how it hands them messages), ``_subscriptions``
(the subscriptions it keeps), ``_queues`` (queues and the FIFO lock, lighter)."""

from duet.agents.runtime._agents import noted_at_once
from duet.agents.runtime._queues import HandOverQueue, lighten_queue
from duet.agents.runtime._runtime import LeanAgentRuntime
from duet.agents.runtime._subscriptions import TeamRegistration

__all__ = ["HandOverQueue", "LeanAgentRuntime", "TeamRegistration", "lighten_queue", "noted_at_once"]
