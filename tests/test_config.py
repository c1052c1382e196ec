"""Configuration: environment variables, the YAML file, reasoning output modes, keep-alives."""

from __future__ import annotations

import importlib
import json
import os
import posixpath
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from packaging.specifiers import SpecifierSet

from duet.agents import PipelineSettings
from duet.api import EnvSettings
from duet.api.cli import SERVE_FLAGS, build_parser, given_flags, main
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
    """The README's table names each setting as a variable and a YAML key, and the file accepts the key."""
    from duet.api.settings import ConfigFile, ServiceOptions

    readme = (ROOT / "README.md").read_text()
    for name in ServiceOptions.model_fields:
        assert f"| `DUET_{name.upper()}` | `{name}` |" in readme, name
        assert name in ConfigFile.model_fields, name


def test_docker_compose_matches_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine runs here: check that the files parse and that what they build and run is
    this repository's package and its ``duet serve``, on the port the settings give."""
    for key in list(os.environ):
        if key.startswith("DUET_"):
            monkeypatch.delenv(key)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    duet = compose["services"]["duet"]
    settings = set(EnvSettings.model_fields)
    environment = duet["environment"]
    names = environment if isinstance(environment, dict) else dict(item.split("=", 1) for item in environment)
    for name in names:
        assert name.startswith("DUET_"), name
        field = name.removeprefix("DUET_").lower()
        assert field in settings or field in ("reasoner_api_key", "answer_api_key"), name
    assert int(names["DUET_PORT"]) == 8000 and names["DUET_HOST"] == "0.0.0.0"
    assert duet["ports"] == ["8000:8000"]
    assert names["DUET_REASONER_BASE_URL"] == names["DUET_ANSWER_BASE_URL"] == "http://ollama:11434/v1"
    assert "duet serve" in " ".join(duet["command"]) if isinstance(duet["command"], list) else "duet serve" in duet["command"]
    assert "ollama" in compose["services"] and "11434" in json.dumps(compose["services"]["ollama"])
    pulled = json.dumps(compose["services"])
    assert names["DUET_REASONER_MODEL"] in pulled and names["DUET_ANSWER_MODEL"] in pulled
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    scripts = project["project"]["scripts"]
    assert duet["build"] == "." and duet["command"][0] in scripts
    assert build_parser().parse_args(duet["command"][1:]).command == "serve"

    image = read_dockerfile(ROOT / "Dockerfile")
    python = re.fullmatch(r"python:(\d+\.\d+)(-[a-z]+)?", image.base)
    assert python and SpecifierSet(project["project"]["requires-python"]).contains(python.group(1)), image.base
    for source in image.placed.values():
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which is not in the repository"
    # It installs this repository's package, from the source it copied, with the pinned versions.
    [(build_dir, arguments)] = image.installs
    targets, constraints = pip_install_targets(arguments)
    assert targets == ["."] and constraints == ["constraints.txt"]
    setuptools = project["tool"]["setuptools"]
    packages = setuptools["packages"]
    # A subpackage without a folder of its own (duet.api.messages) is inside its parent's, copied whole.
    folders = [setuptools["package-dir"].get(package, package.replace(".", "/")) for package in packages
               if package in setuptools["package-dir"] or package.rpartition(".")[0] not in packages]
    for needed in ["pyproject.toml", project["project"]["readme"], *constraints, *folders]:
        assert image.placed.get(posixpath.join(build_dir, needed)) == needed, f"the build needs {needed}"
    # It runs the installed package: from a directory without the source, which would shadow it.
    assert build_dir in image.removed and not image.workdir.startswith(build_dir)
    assert not [path for path in image.placed if path.startswith(image.workdir.rstrip("/") + "/")]
    # Its command is the package's console script, `duet serve`, on the port compose maps and probes.
    script, *argv = image.command
    module, function = scripts[script].split(":")
    assert getattr(importlib.import_module(module), function) is main
    args = build_parser().parse_args(argv)
    served = EnvSettings(**given_flags(args, *SERVE_FLAGS))
    assert args.command == "serve" and served.host == "0.0.0.0"
    assert image.exposed == [served.port] == [EnvSettings.model_fields["port"].default] == [int(names["DUET_PORT"])]
    assert [int(mapping.split(":")[-1]) for mapping in duet["ports"]] == [served.port]
    assert re.search(rf"127\.0\.0\.1:{served.port}/health\b", json.dumps(duet["healthcheck"]["test"]))


@dataclass
class DockerImage:
    """What a Dockerfile builds, as far as the test above reads it (paths are in the image)."""

    base: str = ""
    placed: dict[str, str] = dataclass_field(default_factory=dict)  # image path: the repository path copied there
    installs: list[tuple[str, list[str]]] = dataclass_field(default_factory=list)  # (working directory, pip install arguments)
    removed: list[str] = dataclass_field(default_factory=list)
    workdir: str = "/"
    exposed: list[int] = dataclass_field(default_factory=list)
    entrypoint: list[str] = dataclass_field(default_factory=list)
    cmd: list[str] = dataclass_field(default_factory=list)

    @property
    def command(self) -> list[str]:
        return [*self.entrypoint, *self.cmd]


def read_dockerfile(path: Path) -> DockerImage:
    image = DockerImage()
    lines: list[str] = []
    continued = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not continued and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            continued += stripped[:-1] + " "
        else:
            lines.append(continued + stripped)
            continued = ""
    for line in lines:
        instruction, _, arguments = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            image.base = arguments.split()[0]
        elif instruction == "WORKDIR":
            image.workdir = posixpath.normpath(posixpath.join(image.workdir, arguments.strip()))
        elif instruction == "COPY":
            *sources, target = shlex.split(arguments)
            assert not [s for s in sources if s.startswith("--")], "everything is copied from the repository"
            target = posixpath.normpath(posixpath.join(image.workdir, target))
            for source in sources:
                into_directory = len(sources) > 1 or arguments.rstrip().endswith("/")
                image.placed[posixpath.join(target, posixpath.basename(source)) if into_directory else target] = source
        elif instruction == "RUN":
            for command in re.split(r"&&|;", arguments):
                words = shlex.split(command)
                if "pip" in words[:3] and "install" in words:
                    image.installs.append((image.workdir, words[words.index("install") + 1:]))
                elif words[:2] == ["rm", "-rf"]:
                    image.removed.extend(words[2:])
        elif instruction == "EXPOSE":
            image.exposed.extend(int(port.split("/")[0]) for port in arguments.split())
        elif instruction in ("CMD", "ENTRYPOINT"):
            assert arguments.startswith("["), "exec form: signals reach duet itself, not a shell"
            setattr(image, instruction.lower(), json.loads(arguments))
    return image


def pip_install_targets(arguments: list[str]) -> tuple[list[str], list[str]]:
    """What ``pip install`` installs, and the constraint files it applies."""
    targets: list[str] = []
    constraints: list[str] = []
    words = iter(arguments)
    for word in words:
        if word in ("-c", "--constraint"):
            constraints.append(next(words))
        elif word in ("-r", "--requirement", "-e", "--editable"):
            targets.append(f"{word} {next(words)}")
        elif not word.startswith("-"):
            targets.append(word)
    return targets, constraints
