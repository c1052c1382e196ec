"""The duet as an AgentChat team: the component tree that is served, exported and scripted."""

from __future__ import annotations

from autogen_agentchat.conditions import HandoffTermination, SourceMatchTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import AgentRuntime
from autogen_core.models import ChatCompletionClient
from autogen_core.tools import Workbench

from .answer_agent import AnswerAgent
from .base import CLIENT
from .reasoning_agent import ReasoningAgent
from .settings import PipelineSettings

REASONER_NAME = "reasoner"
ANSWERER_NAME = "answerer"


def build_team(
    settings: PipelineSettings,
    answer_client: ChatCompletionClient,
    reasoner_client: ChatCompletionClient | None = None,
    *,
    workbench: Workbench | None = None,
    tools_as_list: bool = False,
    runtime: AgentRuntime | None = None,
) -> RoundRobinGroupChat:
    """The reasoning agent then the answer agent, sharing ``workbench``, in a round-robin team that
    ends when the answer agent has spoken (a reply, or a handoff of client tool calls to ``client``).

    ``tools_as_list`` writes the workbench's tools under each agent's ``tools`` instead of
    ``workbench`` when the team is dumped: AutoGen Studio's UI displays only that form.
    ``runtime``: run on this runtime instead of an embedded one (the caller starts and stops it).
    """
    tools = list(workbench.tools) if tools_as_list and workbench is not None else None  # type: ignore[attr-defined]
    shared = None if tools is not None else workbench
    participants: list[ReasoningAgent | AnswerAgent] = []
    if settings.reasoner is not None:
        if reasoner_client is None:
            raise ValueError("the pipeline has a reasoner but no reasoner client was given")
        participants.append(
            ReasoningAgent(
                REASONER_NAME,
                reasoner_client,
                system_message=settings.reasoner.system_message,
                workbench=shared,
                tools=tools,
                reason_on_tool_results=settings.reasoner.reason_on_tool_results,
                stop_after_thinking=settings.reasoner.stop_after_thinking,
            )
        )
    participants.append(
        AnswerAgent(
            ANSWERER_NAME,
            answer_client,
            system_message=settings.answer.system_message,
            workbench=shared,
            tools=tools,
            max_tool_rounds=settings.answer.max_tool_rounds,
        )
    )
    return RoundRobinGroupChat(
        participants,  # type: ignore[arg-type]
        name="duet",
        description=f"Duet pipeline '{settings.name}': a reasoning agent thinks, an answer agent replies and calls tools.",
        termination_condition=HandoffTermination(CLIENT) | SourceMatchTermination([ANSWERER_NAME]),
        runtime=runtime,
    )
