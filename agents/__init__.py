"""The duet: a reasoning agent and an answer agent on an AutoGen runtime, sharing one workbench.

Public API, by who needs it:

Running the duet (a Python program, and the HTTP service):

- :class:`Duet` — a pipeline ready to run, from settings or a team file; :meth:`Duet.start` takes a
  :class:`DuetRequest` (the conversation, the client's tools, the :class:`AnswerOptions` with the
  client's :data:`ReasoningEffort` and its prompt-cache marks, :class:`CacheMark`, who asks)
  or OpenAI-style lists, and returns a :class:`DuetStream`; ``stream()`` yields its events,
  ``run()`` collects them into a :class:`DuetResult`; :class:`RunToken` — a run's cancellation token
  (it can ask whether the client is gone); :func:`conversation_from_openai` — OpenAI ``messages`` →
  AutoGen ``LLMMessage`` objects; :func:`cache_marks_from_openai` — the ``cache_control`` marks on their parts;
- settings: :class:`PipelineSettings`, :class:`ReasonerSettings`, :class:`AnswerSettings`,
  :class:`ModelSettings`, :class:`GroundingSettings`, :data:`ReasoningOutput` (how reasoning is shown),
  and their defaults :data:`DEFAULT_BASE_URL`, :data:`DEFAULT_PIPELINE_NAME`, :data:`DEFAULT_REASONING_OUTPUT`;
- events (the ``DuetEvent`` union, :data:`DuetEvent`): :class:`ReasoningDelta` (:class:`ReusedReasoning`:
  a retry's reused reasoning), :class:`ContentDelta`, :class:`ToolCallsRequested` (of :class:`ToolCall`
  objects), :class:`Usage` (its :data:`UsageOrigin`), :class:`Finished` (with its
  :data:`FinishReason`), :class:`Failed`; :class:`ReasoningParagraphs` — how reasoning from two sources
  is joined; an event's ``source`` is an agent of the team: :data:`REASONER_NAME`, :data:`ANSWERER_NAME`,
  :data:`GROUNDER_NAME`;
- watching a run (``observer=``): :class:`RunObserver`, :class:`ModelCallObserver`,
  :class:`ToolCallObserver`, :data:`Stage`, :data:`StoreOutcome`.

The team as AutoGen components (AutoGen Studio, team files; each is importable here under the
provider name its dumps carry):

- :class:`ReasoningAgent`, :class:`AnswerAgent` — the two AgentChat agents; :class:`GroundingAgent`
  runs search tools before the reasoner when a pipeline has ``grounding``; :class:`OpenAICompatibleClient`
  — the lean streaming model client (:mod:`duet.agents.upstream` has the rest of it);
- :func:`build_team` — the agents as a ``RoundRobinGroupChat`` (what is served and exported);
  :func:`export_team` — a pipeline as a team component; :func:`load_team_config`, :func:`load_team` —
  a team file read and loaded (:mod:`duet.agents.pipeline` has the rest of the pipeline).

Errors (the tree is in :mod:`duet.agents._errors`): :class:`DuetError`, the base of every Duet error;
:class:`UpstreamError` and its kinds :class:`UpstreamStatusError` (:class:`UpstreamModelNotFound`), :class:`UpstreamConnectionError`,
:class:`UpstreamUnreachable`, :class:`UpstreamProtocolError`, :class:`UpstreamTimeout`;
:class:`ConversationError`, :class:`TeamLoadError`, :class:`RunNotBoundError`.

For the HTTP layer: :func:`random_id` — a random id for what a client sees; :func:`register_secrets`
and :func:`mask_secrets` — the secrets no message shows; :func:`upstream_error_from_openai` — an
``openai`` SDK error (AutoGen's stock client) as an :class:`UpstreamError`.

The state store is :mod:`duet.agents.continuations`; the runtime :mod:`duet.agents.runtime`.
"""

from duet.agents._answer_agent import AnswerAgent
from duet.agents._cancellation import RunToken
from duet.agents._conversation import ConversationError, cache_marks_from_openai, conversation_from_openai
from duet.agents._errors import (
    DuetError,
    TeamLoadError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamModelNotFound,
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
    ReusedReasoning,
    ToolCall,
    ToolCallsRequested,
    Usage,
    UsageOrigin,
)
from duet.agents._grounding import GroundingAgent
from duet.agents._ids import random_id
from duet.agents._names import ANSWERER_NAME, GROUNDER_NAME, REASONER_NAME
from duet.agents._observe import ModelCallObserver, RunObserver, Stage, StoreOutcome, ToolCallObserver
from duet.agents._options import AnswerOptions, CacheMark, ReasoningEffort
from duet.agents._reasoning_agent import ReasoningAgent
from duet.agents._request import DuetRequest
from duet.agents._run import RunNotBoundError
from duet.agents._settings import (
    DEFAULT_BASE_URL,
    DEFAULT_PIPELINE_NAME,
    DEFAULT_REASONING_OUTPUT,
    AnswerSettings,
    GroundingSettings,
    ModelSettings,
    PipelineSettings,
    ReasonerSettings,
    ReasoningOutput,
)
from duet.agents.pipeline import Duet, DuetResult, DuetStream, build_team, export_team, load_team, load_team_config
from duet.agents.upstream import OpenAICompatibleClient

__all__ = [
    "ANSWERER_NAME",
    "AnswerAgent",
    "AnswerOptions",
    "AnswerSettings",
    "CacheMark",
    "ContentDelta",
    "ConversationError",
    "DEFAULT_BASE_URL",
    "DEFAULT_PIPELINE_NAME",
    "DEFAULT_REASONING_OUTPUT",
    "Duet",
    "DuetError",
    "DuetEvent",
    "DuetRequest",
    "DuetResult",
    "DuetStream",
    "Failed",
    "FinishReason",
    "Finished",
    "GROUNDER_NAME",
    "GroundingAgent",
    "GroundingSettings",
    "ModelCallObserver",
    "ModelSettings",
    "OpenAICompatibleClient",
    "PipelineSettings",
    "REASONER_NAME",
    "ReasonerSettings",
    "ReasoningAgent",
    "ReasoningDelta",
    "ReasoningEffort",
    "ReasoningOutput",
    "ReasoningParagraphs",
    "ReusedReasoning",
    "RunNotBoundError",
    "RunObserver",
    "RunToken",
    "Stage",
    "StoreOutcome",
    "TeamLoadError",
    "ToolCall",
    "ToolCallObserver",
    "ToolCallsRequested",
    "UpstreamConnectionError",
    "UpstreamError",
    "UpstreamModelNotFound",
    "UpstreamProtocolError",
    "UpstreamStatusError",
    "UpstreamTimeout",
    "UpstreamUnreachable",
    "Usage",
    "UsageOrigin",
    "build_team",
    "cache_marks_from_openai",
    "conversation_from_openai",
    "export_team",
    "load_team",
    "load_team_config",
    "mask_secrets",
    "random_id",
    "register_secrets",
    "upstream_error_from_openai",
]
