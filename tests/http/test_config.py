"""Configuration: environment variables, the YAML file, reasoning output modes, keep-alives."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from duet.agents import PipelineSettings
from duet.api import EnvSettings
from tests.conftest import ANSWER, API_KEY, DUET, REASONER, ROOT, DuetServer, sse_events
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

USER = [{"role": "user", "content": "hi"}]


def test_environment_only_server(env_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """DUET_* names configure the default pipeline; no DUET_API_KEYS means open, with a warning."""
    upstream.script(REASONER, Reply(reasoning=["hm"]))
    upstream.script(ANSWER, Reply(content=["ok"]))
    models = httpx.get(f"{env_duet.base_url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["duet-env"]
    completion = httpx.post(f"{env_duet.base_url}/v1/chat/completions", json={"model": "duet-env", "messages": USER}).json()
    assert completion["choices"][0]["message"]["content"] == "<think>\nhm\n</think>\n\nok"  # DUET_REASONING_OUTPUT=think
    assert upstream.requests_for(REASONER)[0].headers["authorization"] == "Bearer reasoner-secret"
    assert upstream.requests_for(ANSWER)[0].headers["authorization"] == "Bearer answer-secret"
    assert "DUET_API_KEYS is empty" in env_duet.log.read_text()
    # DUET_FUNCTION_TOOLS: service tools of the default pipeline.
    assert [t["function"]["name"] for t in upstream.requests_for(ANSWER)[0].body["tools"]] == ["lookup_customer", "slow_report"]


def test_yaml_pipeline_keys_come_from_the_environment(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    http.post("/v1/chat/completions", json={"model": "duet", "messages": USER})
    assert upstream.requests_for(ANSWER)[0].headers["authorization"] == "Bearer upstream-secret"
    assert "authorization" not in upstream.requests_for(REASONER)[0].headers


def test_defaults_target_a_local_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("DUET_"):
            monkeypatch.delenv(key)
    pipeline = EnvSettings().default_pipeline()
    assert pipeline.name == "duet" and pipeline.reasoning_output == "reasoning_content"
    assert pipeline.reasoner is not None and pipeline.reasoner.base_url == "http://localhost:11434/v1"
    assert pipeline.reasoner.model.startswith("deepseek-r1") and pipeline.answer.model.startswith("qwen")
    monkeypatch.setenv("DUET_REASONER_MODEL", "")
    assert EnvSettings().default_pipeline().reasoner is None  # the answer model serves alone


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("model", "expected_content", "expected_reasoning"),
    [
        ("duet", "Answer.", "Thought."),
        ("duet-think", "<think>\nThought.\n</think>\n\nAnswer.", None),
        ("duet-hidden", "Answer.", None),
    ],
)
def test_reasoning_output_modes(http: httpx.Client, upstream: ScriptedUpstream, stream: bool, model: str,
                                expected_content: str, expected_reasoning: str | None) -> None:
    upstream.script(REASONER, Reply(reasoning=["Thought", "."]))
    upstream.script(ANSWER, Reply(content=["Answer", "."]))
    response = http.post("/v1/chat/completions", json={"model": model, "stream": stream, "messages": USER})
    if stream:
        deltas = [c["choices"][0]["delta"] for c in sse_events(response.content)[:-1] if c["choices"]]
        content = "".join(d.get("content", "") for d in deltas)
        reasoning = "".join(d.get("reasoning_content", "") for d in deltas) or None
    else:
        message = response.json()["choices"][0]["message"]
        content, reasoning = message["content"], message.get("reasoning_content")
    assert (content, reasoning) == (expected_content, expected_reasoning)


def test_pings_during_a_silent_stretch(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """The main test server pings after 0.3 s of silence; Dify's parser skips the pings."""
    upstream.script(REASONER, Reply(reasoning=["late"], delay=1.2))
    raw = http.post("/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}).content
    blocks = raw.decode().split("\n\n")
    assert blocks.count(": ping") >= 2
    assert raw.index(b": ping") < raw.index(b"reasoning_content")
    assert sse_events(raw)[-1] == "[DONE]"


def test_stock_autogen_client_pipeline(duet: DuetServer, upstream: ScriptedUpstream) -> None:
    """A pipeline may use AutoGen's OpenAIChatCompletionClient instead of Duet's lean client."""
    upstream.script(REASONER, Reply(reasoning=["plan"]))
    upstream.script(ANSWER, Reply(content=["On it."], tool_calls=[ScriptedCall("lookup", '{"query": "x"}')]))
    client = openai.OpenAI(base_url=f"{duet.base_url}/v1", api_key=API_KEY, max_retries=0)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]
    with client.chat.completions.stream(model="duet-stock-client", messages=USER, tools=tools) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.model_extra["reasoning_content"] == "plan"
    assert final.choices[0].message.tool_calls[0].function.arguments == '{"query": "x"}'
    assert upstream.requests_for(ANSWER)[0].headers["user-agent"].startswith("AsyncOpenAI")


def test_config_errors_stop_startup_with_a_clear_message(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{"name": "x", "answer": {"model": "m", "temprature": 1}}]}))
    result = subprocess.run([DUET, "serve", "--config", str(config)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2
    assert "pipelines.0.models.answer.temprature" in result.stderr and "Extra inputs are not permitted" in result.stderr


def test_the_example_config_parses() -> None:
    from duet.api import ConfigFile

    config = ConfigFile.load(ROOT / "duet.example.yaml")
    assert all(isinstance(p, PipelineSettings) for p in config.pipelines)


def test_every_service_wide_setting_is_documented() -> None:
    """The manual's table (docs/configuration.md) names each setting as a variable and a YAML key, and the file accepts the key."""
    from duet.api._settings import ConfigFile, ServiceOptions

    manual = (ROOT / "docs" / "configuration.md").read_text()
    for name in ServiceOptions.model_fields:
        assert f"| `DUET_{name.upper()}` | `{name}` |" in manual, name
        assert name in ConfigFile.model_fields, name
