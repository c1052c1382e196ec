"""Small real objects the core's unit tests share: a conversation, tool calls and their results, a run that
collects its events, Duet's team on replayed model clients, a team run on a given runtime, a client tool entry."""

from __future__ import annotations

import asyncio
from typing import Any

from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall, SingleThreadedAgentRuntime
from autogen_core.models import (
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    SystemMessage,
    UserMessage,
)
from autogen_ext.models.replay import ReplayChatCompletionClient
from duet.agents import AnswerSettings, PipelineSettings, ReasonerSettings, build_team
from duet.agents._run import DuetRun
from duet.agents.runtime import LeanAgentRuntime
from duet.workbenches import DuetWorkbench

CONVERSATION = [
    SystemMessage(content="Be brief."),
    UserMessage(content="Weather in Paris?", source="user"),
]


def calls(*names: str) -> list[FunctionCall]:
    return [FunctionCall(id=f"call_{name}", name=name, arguments="{}") for name in names]


def results(*names: str, content: str = "ok") -> FunctionExecutionResultMessage:
    return FunctionExecutionResultMessage(
        content=[FunctionExecutionResult(call_id=f"call_{name}", name=name, content=f"{content} {name}") for name in names]
    )


def collecting_run(sink: list[Any]) -> DuetRun:
    return DuetRun(emit=lambda event: sink.append(event) or True, workbench=DuetWorkbench([]))


def replayed_team(runtime: LeanAgentRuntime | None = None, reasoning: str = "Paris is in France.", answer: str = "Sunny today.") -> RoundRobinGroupChat:
    settings = PipelineSettings(reasoner=ReasonerSettings(model="r"), answer=AnswerSettings(model="a"))
    return build_team(settings, ReplayChatCompletionClient([answer]), ReplayChatCompletionClient([reasoning]), runtime=runtime)


def tool_entry(name: str = "kb.search", minimum: int = 1) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "Searches the knowledge base.",
                                             "parameters": {"type": "object", "properties": {"top": {"type": "integer", "minimum": minimum}}}}}


async def run_a_team_on(runtime: SingleThreadedAgentRuntime, *, duet_team: bool = False) -> list[str]:
    """A team of two AgentChat agents with scripted models, run once on ``runtime``; who spoke. A
    plain AgentChat team, or (``duet_team``) one of the class Duet serves its teams in."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.replay import ReplayChatCompletionClient
    from duet.agents.pipeline._team_factory import _RoundRobinTeam

    team = (_RoundRobinTeam if duet_team else RoundRobinGroupChat)(
        [AssistantAgent("first", ReplayChatCompletionClient(["one"])), AssistantAgent("second", ReplayChatCompletionClient(["two"]))],
        termination_condition=MaxMessageTermination(3), runtime=runtime)
    runtime.start()
    result = await asyncio.wait_for(team.run(task="go"), 5)
    await runtime.stop_when_idle()
    return [message.source for message in result.messages]
