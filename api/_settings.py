"""Service configuration: command-line flags, environment variables (``DUET_*``) and an optional
YAML file, in that order of precedence (pydantic-settings sources, see :class:`EnvSettings`)."""

from __future__ import annotations

import difflib
import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, Mapping, Optional, Union
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from duet.agents import DuetError
from duet.agents import AnswerSettings, GroundingSettings, PipelineSettings, ReasonerSettings, ReasoningOutput
from duet.agents.continuations import DEFAULT_FAILOVER_WAIT, DEFAULT_STATE_URL, DEFAULT_STORE_TIMEOUT, check_state_url, redacted_url
from duet.agents import DEFAULT_BASE_URL, DEFAULT_PIPELINE_NAME, DEFAULT_REASONING_OUTPUT
from duet.workbenches import ToolsSettings

if TYPE_CHECKING:
    import yaml  # imported by ConfigFile.load: a service without a configuration file never loads PyYAML


MiB = 1024 * 1024

KEY_VARIABLES = {"reasoner": "DUET_REASONER_API_KEY", "answer": "DUET_ANSWER_API_KEY"}
"""The variables that hold the default pipeline's upstream keys: read from the environment by the
model clients, never an :class:`EnvSettings` field (a secret is never a setting's value)."""


class ConfigError(DuetError, ValueError):
    """A configuration the operator must fix, told in one line that names where it is set (the
    file, the ``DUET_*`` variable or the flag) and what is allowed there."""


def field_errors(exc: ValidationError, where: Callable[[tuple[Any, ...], Any], str]) -> str:
    """A validation error on one line: each problem as ``where: what is wrong``; ``where(loc,
    input)`` names the place of one problem (empty: a problem of the whole)."""
    problems = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        place = where(tuple(error["loc"]), error.get("input"))
        problems.append(f"{place}: {message}" if place else message)
    return "; ".join(problems)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML syntax error as ``line L, column C: problem`` (PyYAML's own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container or ``taskset`` sets it),
    not every core of the machine."""
    counted = getattr(os, "process_cpu_count", None)  # Python 3.13+: also honours PYTHON_CPU_COUNT
    if counted is not None:
        return counted() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _worker_count(value: Any) -> int:
    """``auto`` (the usable cores) or a whole number of processes, at least 1."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return usable_cores()
    try:
        count = int(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        count = 0
    if isinstance(value, (bool, float)) or count < 1:
        raise ValueError(f"expected a whole number of processes (at least 1) or 'auto', got {value!r}")
    return count


WorkerCount = Annotated[int, BeforeValidator(_worker_count)]
LogLevel = Annotated[Literal["critical", "error", "warning", "info", "debug"],
                     BeforeValidator(lambda value: value.lower() if isinstance(value, str) else value)]


class ServiceOptions(BaseModel):
    """Service-wide settings, each settable both as a ``DUET_*`` variable (``DUET_MAX_BODY_BYTES``)
    and as a top-level key of the YAML file (``max_body_bytes``); the variable wins. Every wait has
    a timeout and every buffer a bound: these are the defaults a deployment starts from.

    The one home of these fields: :class:`EnvSettings` (the variables) and :class:`ConfigFile` (the
    YAML file) both inherit them."""

    model_config = ConfigDict(extra="forbid")

    workers: WorkerCount = Field(
        1, ge=1, description="Server processes on the one port: a number, or auto (the cores Duet may use). More than one needs a shared state_url (SQLite or Redis); the limits below hold per process."
    )
    ping_interval: float = Field(5.0, gt=0, description="Seconds of silence before a ': ping' keep-alive.")
    state_url: str = Field(DEFAULT_STATE_URL, description="Where hidden parts of tool rounds wait: sqlite:///path, redis://host:port/db (rediss:// TLS, unix:///path.sock), redis+sentinel://host:port,host:port/service/db (Redis Sentinel) or memory:// (one process only).")
    store_timeout: float = Field(DEFAULT_STORE_TIMEOUT, gt=0, description="Seconds a continuation-store call may take before the round goes on without it.")
    store_failover_wait: float = Field(
        DEFAULT_FAILOVER_WAIT, ge=0, description="Seconds a Redis Sentinel store is waited for when it fails over (from the first failed call): meanwhile tool rounds are held in the worker and written to the new primary, and follow-ups wait for it. Set it to the sentinels' down-after-milliseconds plus a few seconds; 0: no wait (rounds during the failover go on without their hidden part)."
    )
    state_scope: Literal["key", "shared"] = Field(
        "key", description="Whose stored state a request may read and continue: key (only what requests with its own API key stored) or shared (every key's alike, as on an open endpoint)."
    )
    store_outage: Literal["answer", "refuse"] = Field(
        "answer", description="What a Responses request that asks to store (store: true, the default) gets while the store is known to be down: answer (the answer, saying store: false) or refuse (503 store_unavailable with Retry-After, before any model call)."
    )
    reasoning_reuse_seconds: Optional[float] = Field(
        None, ge=0, description="Overrides every pipeline's reasoner.reuse_seconds: how long a retry of the same request reuses its reasoning (0: never). Unset: each pipeline's own."
    )
    # Request size
    max_body_bytes: int = Field(32 * MiB, gt=0, description="Largest request body (413 above it).")
    max_pending_body_bytes: int = Field(
        64 * MiB, gt=0, description="What all request bodies being read and parsed may hold together (each counted by its Content-Length, a chunked one as it arrives); more get 503 with Retry-After. Parsing takes about 4.5 times this in memory at peak."
    )
    max_header_bytes: int = Field(64 * 1024, gt=0, description="Largest request head: request line and headers (431 above it).")
    max_messages: int = Field(4096, gt=0, description="Most messages in one request (400 above it).")
    max_tools: int = Field(128, gt=0, description="Most tools in one request, as OpenAI allows (400 above it).")
    # Connections and concurrency
    # Sized for reasoning streams (docs/performance.md, "Defaults"): a worker's core holds ~1,100 streams at
    # 10 tokens/s; the cap keeps ~30 % of it for arrivals and latency, so duet_saturation_ratio near 1 means a busy core.
    max_concurrent_requests: int = Field(768, gt=0, description="Completions running at once, per worker (a request still sending its body does not count); more get 503 with Retry-After. Sized for streams at about 10 tokens/s: lower it for faster models (docs/performance.md).")
    max_connections: int = Field(4096, gt=0, description="Open client connections, per worker; at the cap the one slowest to send its head (else an idle kept-alive one) is closed to make room, else the new one. Lowered to fit the open-file limit (with an upstream connection for each running completion).")
    header_timeout: float = Field(10.0, gt=0, description="Seconds a client may take to send a request's head (from a new connection's start, or from the head's first byte).")
    body_timeout: float = Field(30.0, gt=0, description="Seconds a client may take to send a request's body (408 after); also how long the rest of a refused body is skipped.")
    keep_alive_timeout: float = Field(
        75.0, gt=0, description="Seconds an idle keep-alive connection stays open (longer than common client pools, so the server never closes one a client is about to reuse)."
    )
    write_timeout: float = Field(30.0, gt=0, description="Seconds a response (a stream, or a non-streamed answer) may stay unwritable (a client that stopped reading) before it is cancelled and its connection dropped.")
    shutdown_timeout: float = Field(30.0, ge=0, description="On SIGTERM or SIGINT: seconds running requests get to finish; then each stream ends with one error event, other requests get 503.")
    # Surface
    docs: bool = Field(False, description="Serve /docs, /redoc and /openapi.json.")
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list, description="Comma-separated origins allowed to call from a browser; empty: no CORS headers at all.")
    ready_probe_upstreams: bool = Field(False, description="/health/ready also asks each distinct upstream's /models (cached a few seconds).")
    model_aliases: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Model names clients insist on (Claude Code's claude-sonnet-4-5, ...), each answered by a served pipeline: a map in YAML, comma-separated 'alias=pipeline' pairs in DUET_MODEL_ALIASES; '*' in an alias matches any text (claude-*=duet). A pipeline's own name is never aliased.",
    )
    # Operations
    metrics: bool = Field(True, description="Serve GET /metrics (Prometheus text format, every worker's counts together).")
    metrics_open: bool = Field(False, description="/metrics needs no API key (for a scraper that cannot send one); otherwise it takes a valid key, or on an open endpoint a client on this machine.")
    log_format: Literal["text", "json"] = Field("text", description="Log lines as text, or one JSON object per line (json).")

    @field_validator("state_url")
    @classmethod
    def _usable_state_url(cls, value: str) -> str:
        return check_state_url(value)

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        return [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value

    @field_validator("model_aliases", mode="before")
    @classmethod
    def _alias_pairs(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        pairs = {}
        for item in filter(None, (item.strip() for item in value.split(","))):
            alias, equals, pipeline = item.partition("=")
            if not equals or not alias.strip() or not pipeline.strip():
                raise ValueError(f"expected comma-separated 'alias=pipeline' pairs, got {item!r}")
            pairs[alias.strip()] = pipeline.strip()
        return pairs

    def aliased(self, model: str) -> str | None:
        """The pipeline an alias names: the exact alias first, then the first pattern that matches."""
        exact = self.model_aliases.get(model)
        if exact is not None:
            return exact
        return next((pipeline for alias, pipeline in self.model_aliases.items() if "*" in alias and fnmatchcase(model, alias)), None)


class EnvSettings(ServiceOptions, BaseSettings):
    """Everything settable from the environment, and the service-wide options resolved.

    Each field is taken from the first source that sets it: the arguments given (``duet serve``
    passes its command-line flags so), then the ``DUET_*`` variables, then, for the
    :class:`ServiceOptions`, the top-level keys of the YAML file that ``config`` names; then the
    default. The model settings describe the default pipeline; a YAML file (``DUET_CONFIG`` /
    ``--config``) replaces them with its own pipelines.
    """

    model_config = SettingsConfigDict(env_prefix="DUET_", extra="ignore")

    host: str = Field("127.0.0.1", description="Interface to bind (0.0.0.0: every interface).")
    port: int = Field(8000, ge=0, le=65535, description="Port to serve on.")
    config: Optional[Path] = Field(None, description="YAML file of pipelines and service-wide options.")
    team: Optional[Path] = Field(None, description="Serve this team file as the only pipeline.")
    api_keys: str = Field("", description="Comma-separated bearer keys; empty means the endpoint is open.")
    model_name: str = Field(DEFAULT_PIPELINE_NAME, description="Served model name of the default pipeline.")
    reasoner_base_url: str = Field(DEFAULT_BASE_URL, description="OpenAI-compatible base URL of the reasoning model.")
    reasoner_model: str = Field("deepseek-r1:7b", description="The reasoning model; empty: the answer model serves alone.")
    answer_base_url: str = Field(DEFAULT_BASE_URL, description="OpenAI-compatible base URL of the answer model.")
    answer_model: str = Field("qwen2.5:7b", description="The answer model (calls the tools).")
    reasoning_output: ReasoningOutput = Field(DEFAULT_REASONING_OUTPUT, description="reasoning_content, think (inline <think>) or hidden.")
    function_tools: str = Field("", description="Comma-separated 'module:function' paths: service tools of the default pipeline.")
    grounding_tools: str = Field("", description="Comma-separated names of the default pipeline's service tools to run before the reasoner.")
    log_level: LogLevel = Field("info", description="Duet's own log level (uvicorn's too).")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Highest first: arguments (command-line flags), ``DUET_*`` variables, the YAML file."""
        return init_settings, env_settings, ConfigFileOptions(settings_cls)

    @model_validator(mode="after")
    def _store_shared_by_workers(self) -> "EnvSettings":
        """A tool round's follow-up may reach another worker: the hidden part must wait where every worker looks."""
        if self.workers > 1 and urlsplit(self.state_url).scheme == "memory":
            raise ValueError(
                f"state_url memory:// keeps tool rounds inside one process, but workers is {self.workers}: "
                "set DUET_STATE_URL / state_url to sqlite:///path or redis://host:port/db, or DUET_WORKERS / workers to 1"
            )
        return self

    @property
    def keys(self) -> list[str]:
        return [key.strip() for key in self.api_keys.split(",") if key.strip()]

    def service_options(self) -> ServiceOptions:
        """The resolved service-wide options alone."""
        return ServiceOptions(**{name: getattr(self, name) for name in ServiceOptions.model_fields})

    def default_pipeline(self) -> PipelineSettings:
        """The pipeline the ``DUET_*`` model variables describe (API keys stay in the environment)."""
        reasoner = None
        if self.reasoner_model:
            reasoner = ReasonerSettings(
                base_url=self.reasoner_base_url, model=self.reasoner_model, api_key_env=KEY_VARIABLES["reasoner"]
            )
        functions = [path.strip() for path in self.function_tools.split(",") if path.strip()]
        grounding_tools = [name.strip() for name in self.grounding_tools.split(",") if name.strip()]
        return PipelineSettings(
            name=self.model_name,
            reasoning_output=self.reasoning_output,
            reasoner=reasoner,
            answer=AnswerSettings(base_url=self.answer_base_url, model=self.answer_model, api_key_env=KEY_VARIABLES["answer"]),
            tools=ToolsSettings(functions=functions),
            grounding=GroundingSettings(tools=grounding_tools) if grounding_tools else None,
        )


class TeamPipelineSettings(BaseModel):
    """A pipeline served from a team file (exported by ``duet export-team`` or edited in AutoGen Studio)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    team_file: Path
    reasoning_output: ReasoningOutput = DEFAULT_REASONING_OUTPUT


def _pipeline_kind(value: Any) -> str:
    has_team = (isinstance(value, dict) and "team_file" in value) or isinstance(value, TeamPipelineSettings)
    return "team" if has_team else "models"


PipelineEntry = Annotated[
    Union[Annotated[PipelineSettings, Tag("models")], Annotated[TeamPipelineSettings, Tag("team")]],
    Discriminator(_pipeline_kind),
]


class ConfigFile(ServiceOptions):
    """The YAML file: several pipelines, each a pair of models or a team file, and any of the
    service-wide :class:`ServiceOptions` (a ``DUET_*`` variable that is set wins over the file)."""

    api_keys: list[str] = Field(default_factory=list, description="Used when DUET_API_KEYS is not set.")
    pipelines: list[PipelineEntry] = Field(min_length=1)

    @classmethod
    def load(cls, path: Path) -> "ConfigFile":
        """Reads and validates the file. Raises :class:`ConfigError` naming the file (and the line of
        a syntax error, the key of a wrong value)."""
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror or exc}") from None
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: {yaml_problem(exc)}") from None
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{path}: " + field_errors(exc, lambda loc, _value: ".".join(str(part) for part in loc))) from None
        names = [p.name for p in config.pipelines]
        if len(names) != len(set(names)):
            raise ConfigError(f"{path}: pipeline names must be unique, got {names}")
        for pipeline in config.pipelines:
            if isinstance(pipeline, TeamPipelineSettings) and not pipeline.team_file.is_absolute():
                pipeline.team_file = path.parent / pipeline.team_file
        return config


class ConfigFileOptions(PydanticBaseSettingsSource):
    """The settings source of the YAML file: the :class:`ServiceOptions` its top level sets.

    The file is the one that the higher sources name (``--config`` or ``DUET_CONFIG``), so this source
    runs after them and reads their result. A served team file (``--team``) replaces the YAML
    file, as it does for the pipelines.
    """

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # the file is read whole, in __call__

    def __call__(self) -> dict[str, Any]:
        config, team = self.current_state.get("config"), self.current_state.get("team")
        if config is None or team is not None:
            return {}
        file = ConfigFile.load(Path(config))
        return {name: getattr(file, name) for name in file.model_fields_set & ServiceOptions.model_fields.keys()}


NOT_SETTINGS = {
    "DUET_PUBLISH": "docker-compose.yml's published interface",
    "DUET_BENCH_LABEL": "the benchmarks' note",
    "DUET_URL": "the examples' client base URL",
}
"""``DUET_*`` variables that other parts of the project read: not settings, and no mistake either."""


def setting_variables() -> list[str]:
    """Every ``DUET_*`` variable ``duet serve`` reads: one per setting, and the upstream key variables."""
    return [f"DUET_{name.upper()}" for name in EnvSettings.model_fields] + list(KEY_VARIABLES.values())


def unknown_variables(environ: Mapping[str, str] = os.environ) -> list[str]:
    """One line for each ``DUET_*`` variable in ``environ`` that is no setting (a typo is otherwise
    ignored in silence: ``DUET_API_KEY=…`` would leave the endpoint open), with the closest
    setting's name when one is close."""
    known = setting_variables()
    problems = []
    for name in sorted(environ):
        upper = name.upper()  # the settings read their variables whatever the case
        if not upper.startswith("DUET_") or upper in known or upper in NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.75)
        hint = f": did you mean {close[0]}?" if close else " (duet serve --help lists them)"
        problems.append(f"{name} is not a Duet setting and is ignored{hint}")
    return problems


def load_settings(flags: Mapping[str, Any] | None = None) -> EnvSettings:
    """:class:`EnvSettings` from ``flags`` (the command line's), the ``DUET_*`` variables and the
    YAML file. Raises :class:`ConfigError` naming the flag, the variable or the file at fault."""
    flags = dict(flags or {})

    def where(loc: tuple[Any, ...], value: Any) -> str:
        if not loc:
            return ""
        name = str(loc[0])
        if name == "state_url" and isinstance(value, str):
            value = redacted_url(value)  # a Redis URL may carry a password
        if name in flags:
            return f"--{name.replace('_', '-')} {value}"
        return f"DUET_{name.upper()}={value}"

    try:
        return EnvSettings(**flags)
    except ValidationError as exc:
        raise ConfigError(field_errors(exc, where)) from None
    except SettingsError as exc:  # a variable pydantic-settings could not decode
        raise ConfigError(str(exc)) from None
