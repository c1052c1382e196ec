"""The duet as an AgentChat team: the component tree that is served, exported and scripted."""

from __future__ import annotations

from typing import Any, Sequence

from autogen_agentchat.base import TerminationCondition
from autogen_agentchat.conditions import HandoffTermination, SourceMatchTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import AgentRuntime
from autogen_core.models import ChatCompletionClient
from autogen_core.tools import BaseTool, Workbench

from duet.workbenches import DuetWorkbench, ProxyTool

from .answer_agent import AnswerAgent
from .grounding import GroundingAgent
from .messages import ANSWERER_NAME, CLIENT, GROUNDER_NAME, REASONER_NAME, TEAM_NAME
from .model_client import ANSWER_MODEL_INFO
from .reasoning_agent import ReasoningAgent
from .settings import REASONER_MODEL_INFO, ModelSettings, PipelineSettings


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
    participants: list[GroundingAgent | ReasoningAgent | AnswerAgent] = []
    if settings.grounding is not None:  # first: its results go to both other agents
        participants.append(GroundingAgent(GROUNDER_NAME, workbench=workbench, **dict(settings.grounding.agent_options())))
    if settings.reasoner is not None:
        if reasoner_client is None:
            raise ValueError("the pipeline has a reasoner but no reasoner client was given")
        participants.append(
            ReasoningAgent(
                REASONER_NAME, reasoner_client, workbench=shared, tools=tools, **dict(settings.reasoner.agent_options())
            )
        )
    participants.append(
        AnswerAgent(ANSWERER_NAME, answer_client, workbench=shared, tools=tools, **dict(settings.answer.agent_options()))
    )
    return RoundRobinGroupChat(
        participants,  # type: ignore[arg-type]
        name=TEAM_NAME,
        description=f"Duet pipeline '{settings.name}': a reasoning agent thinks, an answer agent replies and calls tools.",
        termination_condition=duet_termination(),
        runtime=runtime,
    )


def duet_termination() -> TerminationCondition:
    """How Duet's team ends: when the answer agent has spoken, or anyone handed off to the client."""
    return HandoffTermination(CLIENT) | SourceMatchTermination([ANSWERER_NAME])


STOCK_OPENAI_CLIENT = "autogen_ext.models.openai.OpenAIChatCompletionClient"


def export_team(
    settings: PipelineSettings,
    *,
    client_tools: Sequence[ProxyTool] = (),
    service_tools: Sequence[BaseTool[Any, Any]] = (),
    studio: bool = False,
) -> dict[str, Any]:
    """The pipeline as a team component (JSON-ready), for AutoGen Studio or ``duet serve --team``.

    Both agents share one :class:`~duet.workbenches.DuetWorkbench` holding ``client_tools`` (as proxy
    tools) and ``service_tools``. No secret is written: Duet's client names the environment variable
    of its key. ``studio=True`` is the variant AutoGen Studio's UI edits best: tools listed under each
    agent's ``tools`` and models as AutoGen's ``OpenAIChatCompletionClient`` (whose key Studio takes
    from ``OPENAI_API_KEY``).
    """
    answer_client = settings.answer.build_client(ANSWER_MODEL_INFO)
    reasoner_client = settings.reasoner.build_client(REASONER_MODEL_INFO) if settings.reasoner else None
    workbench = DuetWorkbench([*client_tools, *service_tools])
    team = build_team(settings, answer_client, reasoner_client, workbench=workbench, tools_as_list=studio)
    document = team.dump_component().model_dump(mode="json")
    if studio:
        parts = {ANSWERER_NAME: settings.answer, REASONER_NAME: settings.reasoner}
        for participant in document["config"]["participants"]:
            if participant["config"]["name"] not in parts:
                continue  # the grounding agent calls no model
            model = parts[participant["config"]["name"]]
            assert model is not None
            participant["config"]["model_client"] = _stock_client_component(model, participant["config"]["model_client"])
    return document


def _stock_client_component(model: ModelSettings, duet_client: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {"model": model.model, "base_url": model.base_url, "model_info": duet_client["config"]["model_info"]}
    config.update(model.create_args)
    if model.headers:
        config["default_headers"] = model.headers
    return {
        "provider": STOCK_OPENAI_CLIENT,
        "component_type": "model",
        "version": 1,
        "component_version": 1,
        "description": f"{model.model} at {model.base_url} (API key from OPENAI_API_KEY)",
        "label": "OpenAIChatCompletionClient",
        "config": config,
    }
