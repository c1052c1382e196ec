"""Duet installs under one top-level name, ``duet``: the wheel holds nothing else, it lives beside
the OpenAI Agents SDK (imported as ``agents``) in one environment, a user's own ``agents`` package
can hold service tools, and team files exported under the old names still load."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from duet.agents import AnswerSettings, Duet, PipelineSettings, ReasonerSettings, export_team
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
