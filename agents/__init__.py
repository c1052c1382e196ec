"""The duet: a reasoning agent and an answer agent on an AutoGen runtime, sharing one workbench.

Public API:

- :class:`Duet` — a pipeline ready to run (from settings or a team file); ``stream()`` yields events;
  :class:`TeamFactory` makes every team it serves (shared model clients, the lean runtime);
- the run binding: :class:`DuetRun` (a request's event sink, workbench and options), bound for a run by
  :func:`bind_run`; :func:`current_run`; :func:`task_messages` (the task a team is handed; the driver↔agent
  messages are built and read in :mod:`duet.agents._messages`);
- :class:`ReasoningAgent`, :class:`AnswerAgent` — the two AgentChat agents (AutoGen components), and
  :class:`GroundingAgent`, which runs search tools before the reasoner when a pipeline has ``grounding``;
- :class:`ReasonedAssistantMessage`, :class:`ModelReasoning` — a thinking answer model's own reasoning on
  a tool-calling turn, kept and sent back (:mod:`duet.agents._model_reasoning`);
- :func:`build_team` — the two agents as a ``RoundRobinGroupChat`` (what is served and exported);
- :func:`export_team` — a pipeline as a team component for AutoGen Studio or ``duet serve --team``;
- :class:`OpenAICompatibleClient` — the lean streaming model client (an AutoGen ``ChatCompletionClient``),
  whose stream yields reasoning as :class:`ReasoningText` pieces and the answer as plain ``str``, then an
  :class:`UpstreamResult`;
- settings: :class:`PipelineSettings`, :class:`ReasonerSettings`, :class:`AnswerSettings`, :class:`ModelSettings`,
  :class:`GroundingSettings`, built from the components' own option models (:class:`ModelClientOptions`,
  :class:`ReasoningAgentOptions`, :class:`AnswerAgentOptions`, :class:`DuetAgentOptions`, :class:`GroundingAgentOptions`);
- events: :class:`ReasoningDelta`, :class:`ContentDelta`, :class:`ToolCallsRequested`, :class:`Usage`,
  :class:`Finished`, :class:`Failed` (the ``DuetEvent`` union); :class:`ReasoningParagraphs` (how reasoning
  from two sources is joined);
- :class:`RunToken` — a run's cancellation token (forgets the futures it linked once they are done);
- :func:`conversation_from_openai` — OpenAI ``messages`` → AutoGen ``LLMMessage`` objects;
- :func:`random_id` — a random id for what a client sees (requests, responses, their items);
- errors: :class:`UpstreamError` and its subclasses, :class:`TeamLoadError`, :class:`RunNotBoundError`.
"""

from duet.agents._answer_agent import AnswerAgent, AnswerAgentConfig, AnswerAgentOptions
from duet.agents._model_reasoning import ModelReasoning, ReasonedAssistantMessage
from duet.agents._base import DuetAgentOptions
from duet.agents._cancellation import RunToken
from duet.agents._conversation import ConversationError, ImageURL, conversation_from_openai
from duet.agents._ids import random_id
from duet.agents.pipeline import Duet
from duet.agents._errors import (
    DuetError,
    TeamLoadError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnreachable,
    mask_secrets,
    register_secrets,
    upstream_error_from_openai,
)
from duet.agents._events import (
    ContentDelta,
    DuetEvent,
    Failed,
    Finished,
    FinishReason,
    ReasoningDelta,
    ReasoningParagraphs,
    ToolCall,
    ToolCallsRequested,
    Usage,
)
from duet.agents.upstream import ANSWER_MODEL_INFO, ModelClientOptions, OpenAICompatibleClient, OpenAICompatibleClientConfig, UpstreamResult
from duet.agents._grounding import GroundingAgent, GroundingAgentConfig, GroundingAgentOptions
from duet.agents._messages import task_messages
from duet.agents._names import ANSWERER_NAME, CLIENT, GROUNDER_NAME, REASONER_NAME
from duet.agents._reasoning_agent import ReasoningAgent, ReasoningAgentConfig, ReasoningAgentOptions
from duet.agents.pipeline import DuetResult
from duet.agents._options import AnswerOptions
from duet.agents._request import DuetRequest
from duet.agents._run import DuetRun, RunNotBoundError, bind_run, current_run
from duet.agents._observe import ModelCallObserver, RunObserver, Stage, StoreOutcome, ToolCallObserver
from duet.agents._settings import (
    DEFAULT_BASE_URL,
    DEFAULT_PIPELINE_NAME,
    DEFAULT_REASONING_OUTPUT,
    REASONER_MODEL_INFO,
    AnswerSettings,
    GroundingSettings,
    ModelSettings,
    PipelineSettings,
    ReasonerSettings,
    ReasoningOutput,
)
from duet.agents.pipeline import DuetStream
from duet.agents.pipeline import build_team, export_team
from duet.agents.pipeline import TeamFactory
from duet.agents.pipeline import load_team, load_team_config
from duet.agents._thinking import ReasoningText

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_PIPELINE_NAME",
    "DEFAULT_REASONING_OUTPUT",
    "ModelCallObserver",
    "RunObserver",
    "Stage",
    "StoreOutcome",
    "ToolCallObserver",
    "ANSWERER_NAME",
    "ANSWER_MODEL_INFO",
    "AnswerAgent",
    "AnswerAgentConfig",
    "AnswerAgentOptions",
    "AnswerOptions",
    "AnswerSettings",
    "CLIENT",
    "ContentDelta",
    "ConversationError",
    "Duet",
    "DuetAgentOptions",
    "DuetError",
    "DuetEvent",
    "DuetRequest",
    "DuetResult",
    "DuetRun",
    "DuetStream",
    "Failed",
    "FinishReason",
    "Finished",
    "GROUNDER_NAME",
    "GroundingAgent",
    "GroundingAgentConfig",
    "GroundingAgentOptions",
    "GroundingSettings",
    "ImageURL",
    "ModelClientOptions",
    "ModelReasoning",
    "ModelSettings",
    "OpenAICompatibleClient",
    "OpenAICompatibleClientConfig",
    "PipelineSettings",
    "REASONER_MODEL_INFO",
    "REASONER_NAME",
    "ReasonedAssistantMessage",
    "ReasonerSettings",
    "ReasoningAgent",
    "ReasoningAgentConfig",
    "ReasoningAgentOptions",
    "ReasoningDelta",
    "ReasoningOutput",
    "ReasoningParagraphs",
    "ReasoningText",
    "RunNotBoundError",
    "RunToken",
    "TeamFactory",
    "TeamLoadError",
    "ToolCall",
    "ToolCallsRequested",
    "UpstreamConnectionError",
    "UpstreamError",
    "UpstreamProtocolError",
    "UpstreamResult",
    "UpstreamStatusError",
    "UpstreamTimeout",
    "UpstreamUnreachable",
    "Usage",
    "bind_run",
    "build_team",
    "export_team",
    "conversation_from_openai",
    "random_id",
    "current_run",
    "load_team",
    "load_team_config",
    "mask_secrets",
    "register_secrets",
    "task_messages",
    "upstream_error_from_openai",
]
