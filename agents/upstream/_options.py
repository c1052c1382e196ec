"""How to call an upstream model: the options a model client's config and a model section of the YAML
settings share, the client's serialisable config, and their defaults (named once: the config's fields,
the client's keyword arguments and the YAML model settings all refer to them)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from autogen_core.models import ModelInfo
from pydantic import BaseModel, Field

ANSWER_MODEL_INFO: ModelInfo = {
    "vision": False,
    "function_calling": True,
    "json_output": True,
    "family": "unknown",
    "structured_output": False,
    "multiple_system_messages": True,
}
"""Default ``model_info`` for a model AutoGen does not know: assume it can call functions."""

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 300.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_RETRY_BACKOFF = 0.5
DEFAULT_MAX_RETRY_WAIT = 2.0
"""A longer Retry-After is passed on to the client at once (with its header): waiting it out would
hold the response past what keeps its status honest, and the client's own retry reuses the reasoning."""
DEFAULT_MAX_CONNECTIONS = 0

CacheHint = Literal["auto", "on", "off"]
"""Whether a prompt-cache hint goes to the upstream: ``auto`` where its host documents it (see
:mod:`duet.agents.upstream._cache_hints`), ``on``, ``off``."""


class ModelClientOptions(BaseModel):
    """An upstream model and how to call it: the fields a model client's config
    (:class:`OpenAICompatibleClientConfig`) and a model section of the YAML settings
    (:class:`~duet.agents.ModelSettings`) share. The API key is never stored: only the name of
    the environment variable that holds it."""

    model: str
    base_url: str
    api_key_env: Optional[str] = Field(None, description="Environment variable that holds the API key.")
    create_args: dict[str, Any] = Field(
        default_factory=dict, description="Request fields sent with every call (temperature, extra vendor fields, ...)."
    )
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout: float = Field(DEFAULT_CONNECT_TIMEOUT, description="Seconds to open a connection.")
    read_timeout: float = Field(DEFAULT_READ_TIMEOUT, description="Longest silence allowed from the upstream, in seconds.")
    max_retries: int = Field(
        DEFAULT_MAX_RETRIES,
        ge=0,
        description="Retries of a call that failed before the upstream sent any answer (no connection, 429, 5xx).",
    )
    retry_backoff: float = Field(
        DEFAULT_RETRY_BACKOFF, ge=0, description="Seconds before the first retry; doubled for each next one, with jitter."
    )
    max_retry_wait: float = Field(
        DEFAULT_MAX_RETRY_WAIT,
        ge=0,
        description="Longest Retry-After (seconds) waited out; a longer one is passed on to the client at once.",
    )
    cache_marks: CacheHint = Field(
        "auto", description="Send the client's cache_control marks on content parts and tools: 'auto' where the "
        "upstream documents them (OpenRouter, Alibaba Model Studio), 'on', 'off'.",
    )
    cache_key: CacheHint = Field(
        "auto", description="Send a prompt_cache_key Duet derives for this model's calls (the reasoner's): 'auto' where "
        "the upstream documents it (OpenAI), 'on', 'off'.",
    )


class OpenAICompatibleClientConfig(ModelClientOptions):
    """Serialisable configuration of :class:`~duet.agents.OpenAICompatibleClient`."""

    model_info: ModelInfo = Field(default_factory=ANSWER_MODEL_INFO.copy)
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, description="Connection pool size; 0 means unlimited.")
