"""Settings of a pipeline: which models play the two parts, and how.

The YAML settings are built from the components' own schemas, so each field and each default has
one home: a model section is :class:`~duet.agents.upstream._options.ModelClientOptions` (the fields of
the model client's config) plus the choice of client, and a part's section adds its agent's options
(:class:`~duet.agents._reasoning_agent.ReasoningAgentOptions`,
:class:`~duet.agents._answer_agent.AnswerAgentOptions`). The settings then produce the component
configs: :meth:`ModelSettings.client_config` and ``agent_options()``.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal, Optional

from autogen_core.models import ChatCompletionClient, ModelInfo
from pydantic import BaseModel, ConfigDict, Field

from duet.workbenches import ToolsSettings

from duet.agents._answer_agent import AnswerAgentOptions
from duet.agents._grounding import GroundingAgentOptions
from duet.agents.upstream import ANSWER_MODEL_INFO, ModelClientOptions, OpenAICompatibleClient, OpenAICompatibleClientConfig
from duet.agents._reasoning_agent import ReasoningAgentOptions

REASONER_MODEL_INFO: ModelInfo = {
    "vision": False,
    "function_calling": False,
    "json_output": False,
    "family": "r1",
    "structured_output": False,
    "multiple_system_messages": True,
}
"""Default ``model_info`` for a reasoning model AutoGen does not know."""

ReasoningOutput = Literal["reasoning_content", "think", "hidden"]

DEFAULT_BASE_URL = "http://localhost:11434/v1"
"""A local Ollama's OpenAI-compatible endpoint."""
DEFAULT_PIPELINE_NAME = "duet"
DEFAULT_REASONING_OUTPUT: ReasoningOutput = "reasoning_content"


class ModelSettings(ModelClientOptions):
    """One upstream model: the model client's own fields, plus which client to use. The API key is
    named by environment variable, never written down."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    default_model_info: ClassVar[ModelInfo] = ANSWER_MODEL_INFO
    """What ``model_info`` is merged over: the capabilities assumed for this part's model."""

    base_url: str = DEFAULT_BASE_URL
    model_info: Optional[dict[str, Any]] = Field(
        None, description="AutoGen capabilities (vision, function_calling, ...), merged over the defaults for the part."
    )
    client: Literal["duet", "openai"] = Field(
        "duet",
        description="'duet': Duet's lean streaming client; 'openai': AutoGen's OpenAIChatCompletionClient (openai SDK).",
    )

    def client_config(self, default_info: ModelInfo | None = None) -> OpenAICompatibleClientConfig:
        """The model client's config: these settings' client fields, with ``model_info`` merged over
        ``default_info`` (by default, the part's :attr:`default_model_info`)."""
        info = dict(default_info or self.default_model_info) | dict(self.model_info or {})
        return OpenAICompatibleClientConfig(**_fields(self, ModelClientOptions), model_info=info)

    def build_client(self, default_info: ModelInfo | None = None) -> ChatCompletionClient:
        """Creates the model client (with its connection pool): once per pipeline, at startup."""
        config = self.client_config(default_info)
        if self.client == "openai":
            return _stock_client(config)
        return OpenAICompatibleClient._from_config(config)


def _fields(settings: BaseModel, schema: type[BaseModel]) -> dict[str, Any]:
    """The values of ``schema``'s fields in ``settings`` (a subclass of it)."""
    return {name: getattr(settings, name) for name in schema.model_fields}


def _stock_client(config: OpenAICompatibleClientConfig) -> ChatCompletionClient:
    """AutoGen's ``OpenAIChatCompletionClient`` for the same model (the openai SDK on the hot path)."""
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from duet.agents._errors import register_secrets

    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    register_secrets([key, *config.headers.values()])  # masked in every error message and log line
    return OpenAIChatCompletionClient(
        model=config.model,
        base_url=config.base_url,
        api_key=key or "not-needed",
        model_info=config.model_info,
        timeout=config.read_timeout,
        max_retries=config.max_retries,  # the openai SDK's own policy (backoff, Retry-After up to 60 s)
        default_headers=config.headers or None,
        include_name_in_message=False,
        **config.create_args,
    )


class ReasonerSettings(ReasoningAgentOptions, ModelSettings):
    """The ``reasoner:`` section: its model, and the reasoning agent's options."""

    default_model_info: ClassVar[ModelInfo] = REASONER_MODEL_INFO

    max_retries: int = Field(
        0, ge=0, description="Retries of a reasoning call that failed before any answer (a call on a pooled connection "
        "the server had closed is retried anyway). 0 by default: a failing reasoner costs one attempt, and the answer "
        "model answers alone (on_failure).",
    )

    def agent_options(self) -> ReasoningAgentOptions:
        """The reasoning agent's options these settings set (its constructor's keywords)."""
        return ReasoningAgentOptions(**_fields(self, ReasoningAgentOptions))


class AnswerSettings(AnswerAgentOptions, ModelSettings):
    """The ``answer:`` section: its model, and the answer agent's options."""

    def agent_options(self) -> AnswerAgentOptions:
        """The answer agent's options these settings set (its constructor's keywords)."""
        return AnswerAgentOptions(**_fields(self, AnswerAgentOptions))


class GroundingSettings(GroundingAgentOptions):
    """The ``grounding:`` section: service tools run on the user's question before the reasoner."""

    model_config = ConfigDict(extra="forbid")

    def agent_options(self) -> GroundingAgentOptions:
        """The grounding agent's options these settings set (its constructor's keywords)."""
        return GroundingAgentOptions(**_fields(self, GroundingAgentOptions))


class PipelineSettings(BaseModel):
    """A served model name and the two models behind it. Without ``reasoner`` the answer model
    serves alone."""

    model_config = ConfigDict(extra="forbid")

    name: str = DEFAULT_PIPELINE_NAME
    reasoning_output: ReasoningOutput = Field(
        DEFAULT_REASONING_OUTPUT,
        description="How thinking reaches the client: 'reasoning_content' deltas, '<think>' tags in content, or 'hidden'.",
    )
    reasoner: Optional[ReasonerSettings] = None
    answer: AnswerSettings
    tools: ToolsSettings = Field(default_factory=ToolsSettings, description="Tools Duet runs itself, for every client.")
    grounding: Optional[GroundingSettings] = Field(
        None, description="Service tools (a web search) run on the user's question before the reasoner thinks."
    )


__all__ = [
    "ANSWER_MODEL_INFO",
    "DEFAULT_BASE_URL",
    "DEFAULT_PIPELINE_NAME",
    "DEFAULT_REASONING_OUTPUT",
    "REASONER_MODEL_INFO",
    "AnswerSettings",
    "GroundingSettings",
    "ModelSettings",
    "PipelineSettings",
    "ReasonerSettings",
    "ReasoningOutput",
]
