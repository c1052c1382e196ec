"""The duet as an AgentChat team: the component tree that is served, exported and scripted."""

from __future__ import annotations

from typing import Any, Sequence

from autogen_agentchat.base import Team, TerminationCondition
from autogen_agentchat.conditions import HandoffTermination, SourceMatchTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_agentchat.teams._group_chat._events import GroupChatReset  # not exported (0.7.5)
from autogen_core import AgentRuntime, CancellationToken, MessageContext, SingleThreadedAgentRuntime
from autogen_core.models import ChatCompletionClient
from autogen_core.tools import BaseTool, Workbench

from duet.workbenches import DuetWorkbench, ProxyTool

from duet.agents._answer_agent import AnswerAgent
from duet.agents._grounding import GroundingAgent
from duet.agents._ids import new_message_id
from duet.agents.pipeline._group_chat import is_group_chat
from duet.agents._names import ANSWERER_NAME, CLIENT, GROUNDER_NAME, REASONER_NAME, TEAM_NAME
from duet.agents.upstream import ANSWER_MODEL_INFO
from duet.agents._reasoning_agent import ReasoningAgent
from duet.agents.runtime import LeanAgentRuntime
from duet.agents._settings import REASONER_MODEL_INFO, ModelSettings, PipelineSettings


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


_RESET = GroupChatReset()  # no fields, and its handlers only read its type: one serves every reset


async def reset_team(team: Team, runtime: SingleThreadedAgentRuntime | None) -> None:
    """Resets a team that has finished a run, and stops ``runtime`` (the team's, started by the
    caller; ``None``: the team's embedded one) once every handler of the run is done.

    AgentChat (0.7.5, pinned) resets a group chat by sending a reset message to each participant and
    to the group chat manager through the runtime: a task and two turns of the event loop each, after
    every request, while the next request may already be arriving. On an unwatched
    :class:`LeanAgentRuntime` the runtime is stopped first (the run's last handlers have finished:
    nothing changes an agent after its reset), then the reset handler of each agent the team made
    is called directly (the same handlers: they clear the agents' buffers, reset the agents and the
    manager's thread, turn and termination); an agent the team never made has nothing to reset.
    Anything else (a team that is running or not initialised, a runtime that is watched, another
    runtime): AgentChat's own reset."""
    if not (is_group_chat(team) and isinstance(runtime, LeanAgentRuntime) and team._initialized
            and not team._is_running and runtime._unobserved()):
        await team.reset()
        if runtime is not None:
            await runtime.stop_when_idle()
        return
    await runtime.stop_when_idle()
    team_id = team._team_id
    made = {agent_id._type: agent for agent_id, agent in runtime._instantiated_agents.items()  # AgentId's fields, read
            if agent_id._key == team_id}
    context = MessageContext(sender=None, topic_id=None, is_rpc=True, cancellation_token=CancellationToken(), message_id=new_message_id())
    for agent_type in (*team._participant_topic_types, team._group_chat_manager_topic_type):
        agent = made.get(agent_type)  # (an AgentId would check its type against a pattern each time)
        if agent is not None:
            await agent.handle_reset(_RESET, context)  # type: ignore[attr-defined]
    output = team._output_message_queue
    while not output.empty():
        output.get_nowait()


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
