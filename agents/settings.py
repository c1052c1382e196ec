"""Settings of a pipeline: which models play the two parts, and how."""

from __future__ import annotations

from typing import Any, Literal, Optional

from autogen_core.models import ChatCompletionClient, ModelInfo
from pydantic import BaseModel, ConfigDict, Field

from duet.workbenches import ToolsSettings

from .model_client import ANSWER_MODEL_INFO, OpenAICompatibleClient
from .reasoning_agent import DEFAULT_MAX_REASONING_CHARS, DEFAULT_MAX_REASONING_SECONDS

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


class ModelSettings(BaseModel):
    """One upstream model. The API key is named by environment variable, never written down."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    base_url: str = "http://localhost:11434/v1"
    model: str
    api_key_env: Optional[str] = Field(None, description="Environment variable that holds the API key.")
    model_info: Optional[dict[str, Any]] = Field(
        None, description="AutoGen capabilities (vision, function_calling, ...), merged over the defaults for the part."
    )
    create_args: dict[str, Any] = Field(default_factory=dict, description="Request fields sent with every call.")
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout: float = 10.0
    read_timeout: float = Field(300.0, description="Longest silence allowed from the upstream, in seconds.")
    max_retries: int = Field(
        2, ge=0, description="Retries of a call that failed before the upstream sent any answer (no connection, 429, 5xx)."
    )
    retry_backoff: float = Field(0.5, ge=0, description="Seconds before the first retry; doubled for each next one, with jitter.")
    max_retry_wait: float = Field(
        10.0, ge=0, description="Longest Retry-After (seconds) waited out; a longer one is passed on to the client at once."
    )
    client: Literal["duet", "openai"] = Field(
        "duet",
        description="'duet': Duet's lean streaming client; 'openai': AutoGen's OpenAIChatCompletionClient (openai SDK).",
    )
    system_message: Optional[str] = None

    def build_client(self, default_info: ModelInfo) -> ChatCompletionClient:
        """Creates the model client (with its connection pool): once per pipeline, at startup."""
        info = dict(default_info) | dict(self.model_info or {})
        if self.client == "openai":
            import os

            from autogen_ext.models.openai import OpenAIChatCompletionClient

            from .errors import register_secrets

            key = os.environ.get(self.api_key_env) if self.api_key_env else None
            register_secrets([key, *self.headers.values()])  # masked in every error message and log line
            return OpenAIChatCompletionClient(
                model=self.model,
                base_url=self.base_url,
                api_key=key or "not-needed",
                model_info=info,  # type: ignore[arg-type]
                timeout=self.read_timeout,
                max_retries=self.max_retries,  # the openai SDK's own policy (backoff, Retry-After up to 60 s)
                default_headers=self.headers or None,
                include_name_in_message=False,
                **self.create_args,
            )
        return OpenAICompatibleClient(
            model=self.model,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            model_info=info,  # type: ignore[arg-type]
            create_args=self.create_args,
            headers=self.headers,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            max_retries=self.max_retries,
            retry_backoff=self.retry_backoff,
            max_retry_wait=self.max_retry_wait,
        )


class ReasonerSettings(ModelSettings):
    reason_on_tool_results: bool = Field(False, description="Think again on rounds that only bring tool results.")
    stop_after_thinking: bool = Field(True, description="Close the reasoning call when the thinking ends.")
    max_reasoning_chars: int = Field(
        DEFAULT_MAX_REASONING_CHARS,
        ge=0,
        description="Longest reasoning, in characters: then the call is closed, a note ends the reasoning and the "
        "answer model goes on with the reasoning so far. 0: no limit.",
    )
    max_reasoning_seconds: float = Field(
        DEFAULT_MAX_REASONING_SECONDS,
        ge=0,
        description="Longest reasoning call, in seconds (from the request to the model on); then as for "
        "max_reasoning_chars. 0: no limit.",
    )


class AnswerSettings(ModelSettings):
    max_tool_rounds: int = Field(8, ge=0, description="Rounds of service-tool calls before the model must answer.")


class PipelineSettings(BaseModel):
    """A served model name and the two models behind it. Without ``reasoner`` the answer model
    serves alone."""

    model_config = ConfigDict(extra="forbid")

    name: str = "duet"
    reasoning_output: ReasoningOutput = Field(
        "reasoning_content",
        description="How thinking reaches the client: 'reasoning_content' deltas, '<think>' tags in content, or 'hidden'.",
    )
    reasoner: Optional[ReasonerSettings] = None
    answer: AnswerSettings
    tools: ToolsSettings = Field(default_factory=ToolsSettings, description="Tools Duet runs itself, for every client.")


__all__ = [
    "ANSWER_MODEL_INFO",
    "REASONER_MODEL_INFO",
    "AnswerSettings",
    "ModelSettings",
    "PipelineSettings",
    "ReasonerSettings",
    "ReasoningOutput",
]
