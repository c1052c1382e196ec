"""Duet installs under one top-level name, ``duet``: the wheel holds nothing else, it lives beside
the OpenAI Agents SDK (imported as ``agents``) in one environment, a user's own ``agents`` package
can hold service tools, and team files exported under the old names still load."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from duet.agents import AnswerSettings, Duet, PipelineSettings, ReasonerSettings, export_team, load_team, load_team_config
from duet.agents.pipeline import OldTeamFileWarning
from duet.workbenches import proxy_tools_from_openai
from tests.conftest import ANSWER, API_KEY, REASONER, ROOT, DuetServer, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

# What the wheel is built from (as the Dockerfile copies it); a copy, so no build output lands in the tree.
SOURCES = ["pyproject.toml", "README.md", "constraints.txt", "duet", "agents", "workbenches", "api"]
QUESTION = [{"role": "user", "content": "Who is a@b.c?"}]


WHEELHOUSE = Path(sys.prefix) / "wheelhouse"
"""Filled by the test setup (``make test``): what the fresh venv below installs, so the test itself is offline."""


def upstream_env(upstream: ScriptedUpstream) -> dict[str, str]:
    return {"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
            "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": API_KEY}


def ask(server: DuetServer, model: str = "duet") -> str:
    response = httpx.post(f"{server.base_url}/v1/chat/completions", headers=server.key_header, timeout=30,
                          json={"model": model, "messages": QUESTION})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def answer_from_results(body: dict) -> Reply:
    return Reply(content=["Results: ", " | ".join(m["content"] for m in body["messages"] if m["role"] == "tool")])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name)  # type: ignore[operator]
    # Its build backend (setuptools) comes from the wheelhouse the test setup filled: nothing is fetched.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index", "--find-links", str(WHEELHOUSE),
                    "-w", str(source / "dist"), str(source)],
                   check=True, capture_output=True, timeout=120)
    [built] = (source / "dist").glob("*.whl")
    return built


def test_wheel_installs_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [top_level] = [name for name in names if name.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["duet"]
        [entry_points] = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
        assert "duet = duet.api:main" in archive.read(entry_points).decode()
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")} == {"duet"}
    assert {"duet/__init__.py", "duet/agents/__init__.py", "duet/workbenches/__init__.py", "duet/api/server/_cli.py"} <= set(names)


def test_editable_install_imports_duet_only_from_anywhere(tmp_path: Path) -> None:
    probe = ("import importlib.util, duet.agents, duet.workbenches, duet.api.server._cli;"
             "print(duet.agents.__file__); agents = importlib.util.find_spec('agents');"
             "print(agents and agents.origin, importlib.util.find_spec('api'))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    location, specs = result.stdout.splitlines()
    assert Path(location) == ROOT / "agents" / "__init__.py"  # the repository's folder, mapped
    # `agents` and `api` stay free for other packages: nothing, or the OpenAI Agents SDK the test extras install.
    agents, api = specs.split()
    installed_sdk = next(Path(sys.prefix).glob("lib/python*/site-packages/agents/__init__.py"), None)
    assert (agents == "None" or Path(agents) == installed_sdk) and api == "None", specs


@pytest.mark.packaging
def test_wheel_beside_openai_agents_in_one_venv(wheel: Path, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """Built wheel first, then openai-agents (the order that overwrote ``agents/__init__.py``): both work."""
    assert any(WHEELHOUSE.glob("openai_agents-*.whl")), f"{WHEELHOUSE} lacks openai-agents: run the test setup (make test)"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-index", "--find-links", str(WHEELHOUSE)]
    constraints = Path(sys.prefix) / "constraints-packaging.txt"  # the project's pins but websockets (openai-agents caps it below 17)
    [agents_sdk] = [line for line in constraints.read_text().splitlines() if line.startswith("openai-agents==")]
    for requirement in (str(wheel), agents_sdk):
        result = subprocess.run([*pip, "-c", str(constraints), requirement], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]

    probe = ("from agents import Agent, Runner; import agents, duet.agents, duet.workbenches, duet.api;"
             "assert Agent(name='a').name == 'a' and hasattr(agents, 'function_tool'); print(duet.agents.Duet.__module__)")
    result = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "duet.agents.pipeline._duet", result.stderr

    upstream.script(REASONER, Reply(reasoning=["Look it up."]))
    upstream.script(ANSWER, Reply(content=["Ada."]))
    server = DuetServer([], upstream_env(upstream), tmp_path / "duet.log", cwd=tmp_path, command=str(venv / "bin" / "duet"))
    try:
        assert ask(server) == "Ada."
    finally:
        server.stop()


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    """A user's project whose own package is called ``agents``, holding a service tool."""
    package = tmp_path / "project" / "agents"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""The user\'s own agents."""\n')
    (package / "crm.py").write_text(
        "from duet.workbenches import service_tool\n\n\n"
        "@service_tool\n"
        "def lookup(email: str) -> dict:\n"
        '    """Finds a customer by e-mail."""\n'
        '    return {"email": email, "name": "Ada", "from": __name__}\n'
    )
    return package.parent


def test_service_tool_from_a_user_package_named_agents(user_project: Path, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Look it up."]))
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("lookup", '{"email": "a@b.c"}')]), answer_from_results)
    server = DuetServer([], upstream_env(upstream) | {"DUET_FUNCTION_TOOLS": "agents.crm:lookup"},
                        user_project / "duet.log", cwd=user_project)
    try:
        result = json.loads(ask(server).removeprefix("Results: "))
    finally:
        server.stop()
    assert result == {"email": "a@b.c", "name": "Ada", "from": "agents.crm"}
    sent = upstream.requests_for(ANSWER)[0].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["lookup"]


@pytest.fixture
def old_team_file(upstream: ScriptedUpstream, tmp_path: Path) -> Path:
    """A team exported before the rename: providers named ``agents.*`` and ``workbenches.*``."""
    settings = PipelineSettings(reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
                                answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER))
    text = json.dumps(export_team(settings, client_tools=proxy_tools_from_openai([tool("kb.lookup")])))
    old = text.replace('"duet.agents.', '"agents.').replace('"duet.workbenches.', '"workbenches.')
    assert '"agents.ReasoningAgent"' in old and '"workbenches.ProxyTool"' in old and '"duet.' not in old
    path = tmp_path / "old-team.json"
    path.write_text(old)
    return path


def test_team_file_with_old_provider_names_loads_with_a_warning(old_team_file: Path) -> None:
    with pytest.warns(FutureWarning, match=r"old top-level names \(agents\.AnswerAgent, .*workbenches\.ProxyTool\)") as caught:
        duet = Duet.from_team(old_team_file)
    assert len(caught) == 1 and duet.name == "duet"


def test_old_team_file_is_served(old_team_file: Path, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(REASONER, Reply(reasoning=["Say hi."]))
    upstream.script(ANSWER, Reply(content=["Hi."]))
    server = DuetServer(["--team", str(old_team_file), "--model-name", "old-team"], {"DUET_API_KEYS": API_KEY},
                        tmp_path / "duet.log", cwd=tmp_path)
    try:
        assert ask(server, "old-team") == "Hi."
    finally:
        server.stop()
    warnings = [line for line in server.log.read_text().splitlines() if "old top-level names" in line]
    assert len(warnings) == 1 and "FutureWarning" in warnings[0]


TEAM_0_1_0 = ROOT / "tests" / "fixtures" / "team-0.1.0.json"
"""A team file as Duet 0.1.0 exported it: ``duet export-team --config team-0.1.0.yaml --tools
team-0.1.0.tools.json`` (both beside it) run on the commit before the packages moved under ``duet.``
(7462b5e^). Its providers are ``agents.*`` and ``workbenches.*``; its upstreams ``http://127.0.0.1:9/v1``."""
OLD_PROVIDERS = "agents.AnswerAgent, agents.OpenAICompatibleClient, agents.ReasoningAgent, workbenches.DuetWorkbench, workbenches.ProxyTool"
COMPONENT_TEXT = {"description", "label", "version", "component_version"}  # a component's, not its configuration


@pytest.fixture
def team_0_1_0(upstream: ScriptedUpstream, tmp_path: Path) -> Path:
    path = tmp_path / "team-0.1.0.json"
    path.write_text(TEAM_0_1_0.read_text().replace("http://127.0.0.1:9/v1", upstream.base_url))
    return path


def assert_holds(old: object, loaded: object, where: str = "team") -> None:
    """Every setting of ``old`` (a component tree) is in ``loaded``, with the same value; providers renamed."""
    if isinstance(old, dict):
        assert isinstance(loaded, dict), where
        for key, value in old.items():
            if key == "provider" and value.startswith(("agents.", "workbenches.")):
                assert loaded[key] == f"duet.{value}", where
            elif not ("provider" in old and key in COMPONENT_TEXT):
                assert key in loaded, f"{where}.{key}"
                assert_holds(value, loaded[key], f"{where}.{key}")
    elif isinstance(old, list):
        assert isinstance(loaded, list) and len(loaded) == len(old), where
        for index, (item, other) in enumerate(zip(old, loaded, strict=True)):
            assert_holds(item, other, f"{where}[{index}]")
    else:
        assert loaded == old, f"{where}: {loaded!r} != {old!r}"


def test_a_team_file_of_duet_0_1_0_loads_as_its_configuration_says(team_0_1_0: Path) -> None:
    with pytest.warns(OldTeamFileWarning, match=rf"team file {team_0_1_0} names providers by their old top-level names \({OLD_PROVIDERS}\)"):
        config = load_team_config(team_0_1_0)
    assert issubclass(OldTeamFileWarning, FutureWarning)

    async def loaded() -> dict[str, object]:
        team = load_team(config)
        try:
            return team.dump_component().model_dump()
        finally:
            for agent in team._participants:  # type: ignore[attr-defined]
                await agent.close()

    assert_holds(json.loads(team_0_1_0.read_text()), asyncio.run(loaded()))


def test_duet_serve_says_once_that_a_team_file_of_duet_0_1_0_is_old_and_serves_it(
        team_0_1_0: Path, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script("old-reasoner", Reply(reasoning=["Chart it."]))
    upstream.script("old-answer", Reply(content=["Ahoy."]))
    server = DuetServer(["--team", str(team_0_1_0), "--model-name", "old", "--workers", "2"], {"DUET_API_KEYS": API_KEY},
                        tmp_path / "duet.log", cwd=tmp_path)
    try:
        assert ask(server, "old") == "Ahoy."
    finally:
        server.stop()
    said = [line for line in server.log.read_text().splitlines() if "agents.AnswerAgent" in line]
    assert len(said) == 1, server.log.read_text()  # the process that starts the workers says it; no worker repeats it
    assert f"team file {team_0_1_0} names providers by their old top-level names ({OLD_PROVIDERS})" in said[0]
    assert "WARNING" in said[0] and "FutureWarning" in said[0]
    reasoner, answer = upstream.requests_for("old-reasoner")[0], upstream.requests_for("old-answer")[0]
    assert reasoner.body["messages"][0]["content"].startswith("Think like a cartographer.")
    assert reasoner.body["temperature"] == 0.3
    assert answer.body["messages"][0]["content"].startswith("Answer like a sailor.")
    assert (answer.body["temperature"], answer.body["max_tokens"], answer.headers.get("x-team")) == (0.7, 333, "old")


def test_duet_check_says_once_that_a_team_file_is_old(team_0_1_0: Path, tmp_path: Path) -> None:
    checked = subprocess.run([str(Path(sys.executable).parent / "duet"), "check", "--team", str(team_0_1_0)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, env={**os.environ, "DUET_STATE_URL": "memory://"})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    said = [line for line in (checked.stdout + checked.stderr).splitlines() if "agents.AnswerAgent" in line]
    assert said == [f"warning: team file {team_0_1_0} names providers by their old top-level names ({OLD_PROVIDERS}); "
                    "loaded as duet.*, re-export it with `duet export-team` to drop this warning"]
