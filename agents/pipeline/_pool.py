"""Idle teams of one pipeline, kept for reuse between runs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Sequence

from autogen_agentchat.base import Team
from autogen_core import SingleThreadedAgentRuntime
from autogen_core.models import ChatCompletionClient

from duet.agents._base import DuetAgent


@dataclass(eq=False)
class TeamSlot:
    """A team and, unless it embeds its own, the runtime it runs on (started for each run).

    What closes with it: ``owns_agents``, the team's agents and their model clients, made for it
    alone when a team that is not Duet's own is loaded whole; otherwise ``own_clients``, the model
    clients made for this team alone (those a pipeline does not share). The clients a
    pipeline shares are closed by its :class:`~duet.agents.pipeline.TeamFactory`, never by a team.
    ``first_speaker``: the agent the team hands every new task to first, when that is certain (Duet's
    own team); a run lets it open its model call ahead (:meth:`DuetAgent.head_start`)."""

    team: Team
    runtime: SingleThreadedAgentRuntime | None = None
    owns_agents: bool = False
    own_clients: Sequence[ChatCompletionClient] = ()
    first_speaker: DuetAgent | None = None

    async def close(self) -> None:
        clients = list(self.own_clients)
        if self.owns_agents:
            # BaseGroupChat has no public accessor for its participants (AutoGen Studio reads it too).
            for agent in getattr(self.team, "_participants", []):
                with contextlib.suppress(Exception):
                    await agent.close()
                # Duet's agents close their model client; AgentChat's (0.7.5, pinned) do not:
                # BaseChatAgent.close does nothing, and AssistantAgent keeps its client in _model_client.
                client = getattr(agent, "_model_client", None)
                if client is not None and not isinstance(agent, DuetAgent):
                    clients.append(client)
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


class TeamPool:
    """Idle teams of one pipeline. AgentChat teams hold per-run state and refuse concurrent runs,
    so each request leases its own; a team that finished cleanly is reset and reused, which keeps
    its agents and their registrations on its runtime alive. At most ``max_idle`` wait; a team
    released beyond that is the caller's to close."""

    def __init__(self, factory: Callable[[], TeamSlot], max_idle: int = 64) -> None:
        self._factory = factory
        self._idle: list[TeamSlot] = []
        self._max_idle = max_idle

    def acquire(self) -> TeamSlot:
        return self._idle.pop() if self._idle else self._factory()

    def release(self, slot: TeamSlot) -> bool:
        """Keeps ``slot`` for reuse; False when the pool is full (the caller closes it)."""
        if len(self._idle) >= self._max_idle:
            return False
        self._idle.append(slot)
        return True

    def drain(self) -> list[TeamSlot]:
        idle, self._idle = self._idle, []
        return idle
