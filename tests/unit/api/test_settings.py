"""Settings as pure code (no HTTP): each default in one place, the YAML settings building the
component configs a team is made of, and where each setting comes from (flag > variable > YAML file
> default)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from autogen_agentchat.base import Team

from duet.agents import AnswerAgent, AnswerSettings, GroundingAgent, GroundingSettings, ModelSettings, OpenAICompatibleClient, PipelineSettings, ReasonerSettings, ReasoningAgent, export_team
from duet.agents._answer_agent import AnswerAgentConfig, AnswerAgentOptions
from duet.agents._grounding import GroundingAgentConfig
from duet.agents.upstream import OpenAICompatibleClientConfig
from duet.agents._reasoning_agent import ReasoningAgentConfig, ReasoningAgentOptions
from duet.api import ConfigFile, EnvSettings
from duet.api.server._cli import SERVE_FLAGS, build_parser, given_flags, main
from duet.api._settings import ConfigError, ServiceOptions, load_settings, setting_variables, unknown_variables

YAML_SETTINGS = (ModelSettings, ReasonerSettings, AnswerSettings, GroundingSettings)
COMPONENT_CONFIGS = (OpenAICompatibleClientConfig, ReasoningAgentConfig, AnswerAgentConfig, GroundingAgentConfig)
CONSTRUCTORS = (OpenAICompatibleClient, ReasoningAgent, AnswerAgent, GroundingAgent)
# Settings whose default the YAML settings, a component config and a constructor each state: the
# number of places each appears in (a model client's field: three settings classes, the client's
# config and its constructor; an agent's option: its part's settings, its config and its constructor).
DEFAULTED = {
    "connect_timeout": 5, "read_timeout": 5, "max_retries": 5, "retry_backoff": 5, "max_retry_wait": 5,
    "reason_on_tool_results": 3, "stop_after_thinking": 3, "max_reasoning_chars": 3, "max_reasoning_seconds": 3,
    "max_tool_rounds": 3, "pass_reasoning_back": 3, "when": 3, "timeout": 3, "max_chars": 3, "arguments": 3,
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No DUET_* variable from the machine or another test."""
    for key in list(os.environ):
        if key.startswith("DUET_"):
            monkeypatch.delenv(key)
    return monkeypatch


# -- each default stated once -------------------------------------------------------------------


def defaults_of(name: str) -> dict[str, Any]:
    """Every place that gives ``name`` a default, and the default it gives."""
    found: dict[str, Any] = {}
    for model in (*YAML_SETTINGS, *COMPONENT_CONFIGS):
        if name in model.model_fields:
            found[model.__name__] = model.model_fields[name].get_default(call_default_factory=True)
    for component in CONSTRUCTORS:
        parameter = inspect.signature(component.__init__).parameters.get(name)
        if parameter is not None:
            found[f"{component.__name__}()"] = parameter.default
    return found


@pytest.mark.parametrize("name", DEFAULTED)
def test_the_yaml_settings_the_component_configs_and_the_constructors_agree_on_each_default(name: str) -> None:
    found = defaults_of(name)
    assert len(found) == DEFAULTED[name], found  # the setting is still where a user sets it, at every level
    if name == "max_retries":  # the reasoner's own, on purpose (issue 26): a reasoner that is down costs one attempt
        assert found.pop("ReasonerSettings") == 0
    assert len(set(found.values())) == 1, f"{name} has different defaults: {found}"


# -- settings -> component configs --------------------------------------------------------------

FULL_PIPELINE = """
pipelines:
  - name: full
    reasoning_output: think
    reasoner:
      base_url: http://127.0.0.1:9/v1
      model: r1
      api_key_env: SETTINGS_TEST_REASONER_KEY
      model_info: {vision: true}
      create_args: {temperature: 0.2}
      headers: {X-Settings-Test: settings-test-header-7f3a}
      connect_timeout: 3
      read_timeout: 30
      max_retries: 0
      retry_backoff: 0.1
      max_retry_wait: 1
      system_message: Think hard.
      reason_on_tool_results: true
      stop_after_thinking: false
      max_reasoning_chars: 100
      max_reasoning_seconds: 7
    answer:
      base_url: http://127.0.0.1:9/v1
      model: qwen
      max_tool_rounds: 3
      system_message: Answer briefly.
"""


@pytest.fixture
def full_pipeline(tmp_path: Path) -> PipelineSettings:
    path = tmp_path / "duet.yaml"
    path.write_text(FULL_PIPELINE)
    pipeline = ConfigFile.load(path).pipelines[0]
    assert isinstance(pipeline, PipelineSettings)
    return pipeline


def test_the_settings_build_the_client_config_and_the_agent_options(full_pipeline: PipelineSettings) -> None:
    reasoner = full_pipeline.reasoner
    assert reasoner is not None
    config = reasoner.client_config()
    assert (config.model, config.base_url, config.api_key_env) == ("r1", "http://127.0.0.1:9/v1", "SETTINGS_TEST_REASONER_KEY")
    assert (config.connect_timeout, config.read_timeout, config.max_retries, config.retry_backoff, config.max_retry_wait) == (3, 30, 0, 0.1, 1)
    assert config.create_args == {"temperature": 0.2} and config.headers == {"X-Settings-Test": "settings-test-header-7f3a"}
    assert config.model_info["vision"] is True and config.model_info["family"] == "r1"  # merged over the reasoner's defaults
    assert full_pipeline.answer.client_config().model_info["function_calling"] is True  # the answer model's defaults
    assert reasoner.agent_options() == ReasoningAgentOptions(
        system_message="Think hard.", reason_on_tool_results=True, stop_after_thinking=False,
        max_reasoning_chars=100, max_reasoning_seconds=7,
    )
    assert full_pipeline.answer.agent_options() == AnswerAgentOptions(system_message="Answer briefly.", max_tool_rounds=3)


def test_an_exported_team_holds_the_configs_the_settings_build(full_pipeline: PipelineSettings) -> None:
    """YAML -> settings -> team -> JSON -> loaded team -> JSON: every client and agent config is the
    one the settings build, and survives the round trip."""
    document = export_team(full_pipeline)
    loaded = Team.load_component(document).dump_component().model_dump(mode="json")
    assert loaded == document
    for dumped in (document, loaded):
        agents = {p["config"]["name"]: p for p in dumped["config"]["participants"]}
        assert list(agents) == ["reasoner", "answerer"]
        for name, part in (("reasoner", full_pipeline.reasoner), ("answerer", full_pipeline.answer)):
            assert part is not None
            agent = agents[name]["config"]
            assert OpenAICompatibleClientConfig.model_validate(agent["model_client"]["config"]) == part.client_config()
            options_type = type(part.agent_options())
            assert options_type.model_validate(agent) == part.agent_options()
        assert agents["reasoner"]["provider"] == "duet.agents.ReasoningAgent"
        assert ReasoningAgentConfig.model_validate(agents["reasoner"]["config"]).max_reasoning_seconds == 7


def test_the_stock_client_variant_is_built_from_the_same_config() -> None:
    """``client: openai``: AutoGen's OpenAIChatCompletionClient, with the model's settings."""
    settings = AnswerSettings(
        model="m", base_url="http://127.0.0.1:9/v1", client="openai", read_timeout=12, max_retries=1,
        headers={"X-Settings-Test": "settings-test-header-7f3a"}, create_args={"temperature": 0.3},
        model_info={"vision": True},
    )
    client = settings.build_client()
    assert type(client).__name__ == "OpenAIChatCompletionClient"
    config = client.dump_component().config
    expected = settings.client_config()
    assert (config["model"], config["base_url"], config["timeout"], config["max_retries"]) == ("m", expected.base_url, 12, 1)
    assert config["default_headers"] == expected.headers and config["temperature"] == 0.3
    assert config["model_info"] == expected.model_info and config["model_info"]["vision"] is True
    lean = AnswerSettings(model="m", base_url="http://127.0.0.1:9/v1", read_timeout=12).build_client()
    assert isinstance(lean, OpenAICompatibleClient)
    assert OpenAICompatibleClientConfig.model_validate(lean.dump_component().config) == AnswerSettings(
        model="m", base_url="http://127.0.0.1:9/v1", read_timeout=12).client_config()


def test_a_typo_in_a_model_section_is_an_error() -> None:
    for settings in (ReasonerSettings, AnswerSettings):
        with pytest.raises(ValueError, match="Extra inputs are not permitted"):
            settings(model="m", max_reasoning_char=5)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="max_connections"):  # the client's pool size is not a YAML key
        AnswerSettings(model="m", max_connections=3)  # type: ignore[call-arg]


# -- precedence: flag > DUET_* variable > YAML file > default --------------------------------------


def other_values(name: str) -> tuple[Any, Any]:
    """Two values of a service-wide option that differ from each other and, the first, from its default."""
    default = ServiceOptions.model_fields[name].get_default(call_default_factory=True)
    if isinstance(default, bool):
        return not default, default  # a bool has two values: the variable sets the default back
    if isinstance(default, (int, float)):
        return default + 1, default + 2
    if default is None:  # an optional number (reasoning_reuse_seconds: unset by default)
        return 30.0, 60.0
    if isinstance(default, list):
        return ["https://yaml.example"], ["https://variable.example", "https://other.example"]
    if isinstance(default, dict):
        return {"claude-*": "a"}, {"claude-sonnet-4-5": "a", "gpt-4o": "b"}
    annotation = ServiceOptions.model_fields[name].annotation
    if get_origin(annotation) is Literal:  # one of a few words: another, then the default back
        others = [choice for choice in get_args(annotation) if choice != default]
        return others[0], others[1] if len(others) > 1 else default
    return "memory://", "sqlite:///variable.db"


def as_variable(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ", ".join(f"{alias}={name}" for alias, name in value.items())
    return ",".join(value) if isinstance(value, list) else str(value)


def write_yaml(path: Path, options: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({**options, "pipelines": [{"name": "a", "answer": {"model": "m"}}]}))
    return path


@pytest.mark.parametrize("name", ServiceOptions.model_fields)
def test_a_service_wide_option_comes_from_the_variable_then_the_yaml_then_the_default(
    name: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    default = ServiceOptions.model_fields[name].get_default(call_default_factory=True)
    in_yaml, in_variable = other_values(name)
    config = write_yaml(tmp_path / "duet.yaml", {name: in_yaml})
    assert getattr(EnvSettings().service_options(), name) == default
    clean_env.setenv("DUET_CONFIG", str(config))
    assert getattr(EnvSettings().service_options(), name) == in_yaml
    clean_env.setenv(f"DUET_{name.upper()}", as_variable(in_variable))
    assert getattr(EnvSettings().service_options(), name) == in_variable


def test_each_option_is_taken_from_its_own_highest_source(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    """A field set in the YAML file and not in the environment keeps the file's value while the
    variables that are set win for theirs; the rest keep their defaults."""
    config = write_yaml(tmp_path / "duet.yaml", {"max_tools": 3, "max_messages": 30, "state_url": "memory://"})
    clean_env.setenv("DUET_MAX_MESSAGES", "40")
    clean_env.setenv("DUET_PING_INTERVAL", "0.5")
    options = EnvSettings(config=config).service_options()
    assert (options.max_tools, options.max_messages, options.state_url, options.ping_interval) == (3, 40, "memory://", 0.5)
    assert options.max_body_bytes == ServiceOptions().max_body_bytes
    assert type(options) is ServiceOptions


def test_model_aliases_exact_first_then_the_first_pattern_that_matches(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DUET_MODEL_ALIASES", "claude-haiku-*=small, claude-*=big,claude-sonnet-4-5=exact")
    options = EnvSettings().service_options()
    assert options.model_aliases == {"claude-haiku-*": "small", "claude-*": "big", "claude-sonnet-4-5": "exact"}
    aliased = [options.aliased(name) for name in ("claude-sonnet-4-5", "claude-haiku-4-5-20251001", "claude-opus-4-1", "gpt-4o")]
    assert aliased == ["exact", "small", "big", None]
    clean_env.setenv("DUET_MODEL_ALIASES", "claude-sonnet-4-5")
    with pytest.raises(ValueError, match="alias=pipeline"):
        EnvSettings()


FLAG_VALUES = {  # field: (as a flag, as a variable, the flag's value once parsed)
    "host": ("0.0.0.0", "10.1.2.3", "0.0.0.0"),
    "port": ("9101", "9102", 9101),
    "model_name": ("from-flag", "from-variable", "from-flag"),
    "reasoning_output": ("hidden", "think", "hidden"),
    "team": ("flag-team.json", "variable-team.json", Path("flag-team.json")),
}


def serve_settings(argv: list[str]) -> EnvSettings:
    """The settings ``duet serve`` runs with, given its command line."""
    return EnvSettings(**given_flags(build_parser().parse_args(["serve", *argv]), *SERVE_FLAGS))


@pytest.mark.parametrize("name", FLAG_VALUES)
def test_a_serve_flag_wins_over_its_variable(name: str, clean_env: pytest.MonkeyPatch) -> None:
    flag, variable, parsed = FLAG_VALUES[name]
    default = EnvSettings.model_fields[name].get_default()
    assert getattr(serve_settings([]), name) == default
    clean_env.setenv(f"DUET_{name.upper()}", variable)
    assert str(getattr(serve_settings([]), name)) == variable
    assert getattr(serve_settings([f"--{name.replace('_', '-')}", flag]), name) == parsed


def test_the_config_flag_names_the_yaml_file_and_variables_still_win_over_it(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    by_flag = write_yaml(tmp_path / "flag.yaml", {"max_tools": 3, "max_messages": 30})
    by_variable = write_yaml(tmp_path / "variable.yaml", {"max_tools": 5, "max_messages": 50})
    clean_env.setenv("DUET_CONFIG", str(by_variable))
    assert serve_settings([]).service_options().max_tools == 5
    settings = serve_settings(["--config", str(by_flag)])
    assert settings.config == by_flag and settings.service_options().max_tools == 3  # the flag's file
    clean_env.setenv("DUET_MAX_TOOLS", "9")
    options = serve_settings(["--config", str(by_flag)]).service_options()
    assert (options.max_tools, options.max_messages) == (9, 30)  # flag > variable > YAML > default, per option


def test_a_served_team_file_replaces_the_yaml_file(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DUET_CONFIG", str(write_yaml(tmp_path / "duet.yaml", {"max_tools": 3})))
    assert serve_settings(["--team", "team.json"]).service_options().max_tools == ServiceOptions().max_tools


def test_serve_passes_its_flags_as_arguments_not_through_the_environment(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken file stops ``duet serve`` before it binds a port; the flags never reach os.environ."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"max_tools": 0, "pipelines": [{"name": "a", "answer": {"model": "m"}}]}))
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--config", str(broken), "--port", "9103", "--model-name", "x", "--host", "127.0.0.2"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "duet: cannot start" in error and "max_tools" in error
    assert not [key for key in os.environ if key.startswith("DUET_")]


def test_environment_wins_over_the_yaml(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from duet.api import ServiceConfig

    config = tmp_path / "duet.yaml"
    config.write_text("ping_interval: 0.3\nstate_url: memory://\npipelines: [{name: a, answer: {model: m}}]\n")
    monkeypatch.setenv("DUET_CONFIG", str(config))
    assert (ServiceConfig.from_env().ping_interval, ServiceConfig.from_env().state_url) == (0.3, "memory://")
    monkeypatch.setenv("DUET_PING_INTERVAL", "9")
    monkeypatch.setenv("DUET_STATE_URL", "sqlite:///x.db")
    assert (ServiceConfig.from_env().ping_interval, ServiceConfig.from_env().state_url) == (9.0, "sqlite:///x.db")


# -- configuration mistakes: unknown DUET_* variables, errors that name their variable (issue 27) -----
def test_a_typo_is_named_with_the_setting_it_was_meant_to_be() -> None:
    environ = {"DUET_API_KEY": "secret", "DUET_STATE_URl": "x", "DUET_STORE_TIMEOUT": "1", "duet_workers": "2",
               "DUET_PUBLISH": "0.0.0.0", "DUET_WHATEVER_ELSE": "1", "PATH": "/bin", "DUET_REASONER_API_KEY": "k"}
    assert unknown_variables(environ) == [
        "DUET_API_KEY is not a Duet setting and is ignored: did you mean DUET_API_KEYS?",
        "DUET_WHATEVER_ELSE is not a Duet setting and is ignored (duet serve --help lists them)",
    ]  # DUET_STATE_URl and duet_workers are read (the settings ignore case); DUET_PUBLISH is docker-compose's


def test_every_setting_is_a_known_variable() -> None:
    assert {"DUET_API_KEYS", "DUET_STATE_URL", "DUET_WORKERS", "DUET_ANSWER_API_KEY", "DUET_LOG_FORMAT"} <= set(setting_variables())
    assert unknown_variables({name: "1" for name in setting_variables()}) == []


def test_a_state_url_error_names_its_variable_and_hides_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_STATE_URL", "redis+sentinel://:secret@s1/duet-state")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert str(refused.value) == "DUET_STATE_URL=redis+sentinel://s1/duet-state: a sentinel is host:port, got 's1'"
    monkeypatch.setenv("DUET_STATE_URL", "postgres://db/duet")
    with pytest.raises(ConfigError, match=r"^DUET_STATE_URL=postgres://db/duet: unsupported state URL scheme postgres://"):
        load_settings()
