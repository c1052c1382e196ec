"""AutoGen Studio (0.4.2.2, installed with --no-deps beside AutoGen 0.7.5) accepts and runs Duet's team.

Validated through Studio's own code: its ValidationService in-process, its HTTP API
(``autogenstudio ui``) on loopback, and its team manager (``autogenstudio serve``) running the team.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from autogen_core import ComponentModel

from duet.agents import AnswerSettings, GroundingSettings, PipelineSettings, ReasonerSettings, export_team
from tests.conftest import ANSWER, REASONER, ROOT, free_port, stop_process, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

# Studio is installed apart from the test extras (pip install --no-deps autogenstudio==0.4.2.2, see
# requirements-studio.txt): without it this file is collected and skipped, saying why.
pytest.importorskip("autogenstudio", reason="AutoGen Studio is not installed (make .venv/.test-ready installs it, see requirements-studio.txt)")
from autogenstudio.validation.validation_service import ValidationService  # after the skip
from duet.workbenches import HttpToolSettings, ToolsSettings, model_safe_name, proxy_tools_from_openai

STUDIO = str(Path(sys.executable).parent / "autogenstudio")
LOOKUP = tool("kb.lookup", "Looks something up in the knowledge base.")


def team_document(upstream: ScriptedUpstream, studio: bool) -> dict[str, Any]:
    pipeline = PipelineSettings(
        reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
        answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER),
    )
    return export_team(pipeline, client_tools=proxy_tools_from_openai([LOOKUP]), studio=studio)


class StudioProcess:
    def __init__(self, args: list[str], log: Path, env: dict[str, str], ready_path: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("w")
        # Studio writes files (a .coding folder) into its working directory: not into the repository.
        self.process = subprocess.Popen([STUDIO, *args, "--host", "127.0.0.1", "--port", str(self.port)],
                                        cwd=log.parent, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                                        stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log.read_text()
            try:
                if httpx.get(self.base_url + ready_path, timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        raise RuntimeError(f"AutoGen Studio did not start:\n{log.read_text()}")

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


@pytest.fixture(scope="module")
def studio_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StudioProcess]:
    directory = tmp_path_factory.mktemp("studio")
    server = StudioProcess(["ui", "--appdir", str(directory / "app")], directory / "studio.log", {"OPENAI_API_KEY": "not-needed"}, "/api/health")
    yield server
    server.stop()


@pytest.mark.parametrize("studio", [False, True])
def test_studio_validation_service(upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch, studio: bool) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "not-needed")
    result = ValidationService.validate(ComponentModel.model_validate(team_document(upstream, studio)))
    assert result.is_valid and result.errors == [], result


@pytest.mark.parametrize("studio", [False, True])
def test_studio_http_api_validates_and_imports(studio_ui: StudioProcess, upstream: ScriptedUpstream, studio: bool) -> None:
    document = team_document(upstream, studio)
    validation = httpx.post(f"{studio_ui.base_url}/api/validate/", json={"component": document}, timeout=30).json()
    assert validation["is_valid"] and validation["errors"] == [], validation

    created = httpx.post(f"{studio_ui.base_url}/api/teams/", json={"user_id": "duet-tests", "component": document}, timeout=30)
    assert created.status_code == 200 and created.json()["status"], created.text
    team_id = created.json()["data"]["id"]
    stored = httpx.get(f"{studio_ui.base_url}/api/teams/{team_id}", params={"user_id": "duet-tests"}, timeout=30).json()
    assert stored["data"]["component"] == document


def test_studio_team_manager_runs_the_team(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """``autogenstudio serve --team`` runs a team file through Studio's TeamManager."""
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps(team_document(upstream, studio=True)))
    upstream.script(REASONER, Reply(reasoning=["Use ", "the knowledge base."]))
    upstream.script(ANSWER, Reply(content=["Looking it up."], tool_calls=[ScriptedCall(model_safe_name("kb.lookup"), '{"query": "duet"}')]))
    server = StudioProcess(["serve", "--team", str(team_file)], tmp_path / "serve.log", {"OPENAI_API_KEY": "not-needed"}, "/docs")
    try:
        answer = httpx.get(f"{server.base_url}/predict/What is Duet", timeout=60).json()
    finally:
        server.stop()
    assert answer["status"], answer
    messages = answer["data"]["task_result"]["messages"]
    by_source = {(m["source"], m["type"]) for m in messages}
    assert ("reasoner", "TextMessage") in by_source and ("answerer", "HandoffMessage") in by_source
    reasoning = next(m for m in messages if m["source"] == "reasoner" and m["type"] == "TextMessage")
    assert reasoning["content"] == "Use the knowledge base."
    handoff = next(m for m in messages if m["type"] == "HandoffMessage")
    assert handoff["target"] == "client" and handoff["context"][0]["content"][0]["name"] == model_safe_name("kb.lookup")


def test_studio_validates_and_shows_a_grounded_team(studio_ui: StudioProcess, upstream: ScriptedUpstream,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline with grounding exports its GroundingAgent first; Studio validates the team and keeps
    the grounding (its tools and options) in the team's JSON."""
    monkeypatch.setenv("OPENAI_API_KEY", "not-needed")
    pipeline = PipelineSettings(
        reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
        answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER),
        tools=ToolsSettings(http=[HttpToolSettings(name="web_search", url="http://127.0.0.1:9/search",
                                                   parameters={"type": "object", "properties": {"query": {"type": "string"}}})]),
        grounding=GroundingSettings(tools=["web_search"], timeout=5),
    )
    document = export_team(pipeline, service_tools=[tool.build() for tool in pipeline.tools.http], studio=True)
    assert ValidationService.validate(ComponentModel.model_validate(document)).is_valid
    created = httpx.post(f"{studio_ui.base_url}/api/teams/", json={"user_id": "duet-tests", "component": document}, timeout=30)
    assert created.status_code == 200 and created.json()["status"], created.text
    stored = httpx.get(f"{studio_ui.base_url}/api/teams/{created.json()['data']['id']}", params={"user_id": "duet-tests"}, timeout=30).json()
    grounder = stored["data"]["component"]["config"]["participants"][0]
    assert grounder["provider"] == "duet.agents.GroundingAgent" and grounder["config"]["tools"] == ["web_search"]
    assert grounder["config"]["timeout"] == 5 and grounder["config"]["workbench"]["config"]["tools"][0]["config"]["name"] == "web_search"
