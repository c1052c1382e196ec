"""Service configuration: environment variables (``DUET_*``) and an optional YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag
from pydantic_settings import BaseSettings, SettingsConfigDict

from agents import AnswerSettings, PipelineSettings, ReasonerSettings, ReasoningOutput
from agents.continuations import DEFAULT_STATE_URL
from workbenches import ToolsSettings


class EnvSettings(BaseSettings):
    """Everything settable from the environment. The model settings describe the default
    pipeline; a YAML file (``DUET_CONFIG`` / ``--config``) replaces them with its own pipelines."""

    model_config = SettingsConfigDict(env_prefix="DUET_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    config: Optional[Path] = None
    team: Optional[Path] = Field(None, description="Serve this team file as the only pipeline.")
    api_keys: str = Field("", description="Comma-separated bearer keys; empty means the endpoint is open.")
    model_name: str = "duet"
    reasoner_base_url: str = "http://localhost:11434/v1"
    reasoner_model: str = Field("deepseek-r1:7b", description="Empty: the answer model serves alone.")
    answer_base_url: str = "http://localhost:11434/v1"
    answer_model: str = "qwen2.5:7b"
    reasoning_output: ReasoningOutput = "reasoning_content"
    ping_interval: float = Field(5.0, gt=0, description="Seconds of silence before a ': ping' keep-alive.")
    function_tools: str = Field("", description="Comma-separated 'module:function' paths: service tools of the default pipeline.")
    state_url: str = Field(DEFAULT_STATE_URL, description="Where hidden parts of tool rounds wait: sqlite:///path or redis://host:port/db.")
    log_level: str = "info"

    @property
    def keys(self) -> list[str]:
        return [key.strip() for key in self.api_keys.split(",") if key.strip()]

    def default_pipeline(self) -> PipelineSettings:
        """The pipeline the ``DUET_*`` model variables describe (API keys stay in the environment)."""
        reasoner = None
        if self.reasoner_model:
            reasoner = ReasonerSettings(
                base_url=self.reasoner_base_url, model=self.reasoner_model, api_key_env="DUET_REASONER_API_KEY"
            )
        functions = [path.strip() for path in self.function_tools.split(",") if path.strip()]
        return PipelineSettings(
            name=self.model_name,
            reasoning_output=self.reasoning_output,
            reasoner=reasoner,
            answer=AnswerSettings(base_url=self.answer_base_url, model=self.answer_model, api_key_env="DUET_ANSWER_API_KEY"),
            tools=ToolsSettings(functions=functions),  # type: ignore[arg-type]
        )


class TeamPipelineSettings(BaseModel):
    """A pipeline served from a team file (exported by ``duet export-team`` or edited in AutoGen Studio)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    team_file: Path
    reasoning_output: ReasoningOutput = "reasoning_content"


def _pipeline_kind(value: Any) -> str:
    has_team = isinstance(value, dict) and "team_file" in value or isinstance(value, TeamPipelineSettings)
    return "team" if has_team else "models"


PipelineEntry = Annotated[
    Union[Annotated[PipelineSettings, Tag("models")], Annotated[TeamPipelineSettings, Tag("team")]],
    Discriminator(_pipeline_kind),
]


class ConfigFile(BaseModel):
    """The YAML file: several pipelines, each a pair of models or a team file."""

    model_config = ConfigDict(extra="forbid")

    api_keys: list[str] = Field(default_factory=list, description="Used when DUET_API_KEYS is not set.")
    ping_interval: Optional[float] = Field(None, gt=0)
    state_url: Optional[str] = Field(None, description="Used when DUET_STATE_URL is not set.")
    pipelines: list[PipelineEntry] = Field(min_length=1)

    @classmethod
    def load(cls, path: Path) -> "ConfigFile":
        data = yaml.safe_load(path.read_text()) or {}
        config = cls.model_validate(data)
        names = [p.name for p in config.pipelines]
        if len(names) != len(set(names)):
            raise ValueError(f"{path}: pipeline names must be unique, got {names}")
        for pipeline in config.pipelines:
            if isinstance(pipeline, TeamPipelineSettings) and not pipeline.team_file.is_absolute():
                pipeline.team_file = path.parent / pipeline.team_file
        return config
