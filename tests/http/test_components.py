"""The duet as AutoGen components: dump → JSON → load gives a runnable tree; ``duet serve --team``
serves such a file with everything the settings pipeline does."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest
from autogen_agentchat.base import Team
from autogen_agentchat.messages import HandoffMessage, TextMessage
from autogen_core.models import ChatCompletionClient
from autogen_core.tools import BaseTool, Workbench

from duet.agents import (
    AnswerAgent,
    AnswerSettings,
    Duet,
    OpenAICompatibleClient,
    PipelineSettings,
    ReasonerSettings,
    ReasoningAgent,
    export_team,
)
from tests.conftest import ANSWER, API_KEY, DUET, REASONER, ROOT, DuetServer, sse_events, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from duet.workbenches import DuetWorkbench, ProxyTool, model_safe_name, proxy_tools_from_openai

LOOKUP = tool("kb.lookup", "Looks something up in the knowledge base.")
QUESTION = [{"role": "user", "content": "Look up duet"}]


def settings(upstream: ScriptedUpstream) -> PipelineSettings:
    return PipelineSettings(
        reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
        answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER, api_key_env="UPSTREAM_KEY", system_message="Be exact."),
    )


@pytest.mark.parametrize("studio", [False, True])
def test_dump_load_round_trip(upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch, studio: bool) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", "sk-very-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-studio-key")  # the stock client of the Studio variant reads it on load
    document = export_team(settings(upstream), client_tools=proxy_tools_from_openai([LOOKUP]), studio=studio)
    text = json.dumps(document)
    assert "sk-" not in text and '"api_key"' not in text  # keys stay in the environment

    team = Team.load_component(json.loads(text))
    reasoner, answerer = team._participants  # type: ignore[attr-defined]
    assert isinstance(reasoner, ReasoningAgent) and isinstance(answerer, AnswerAgent)
    assert isinstance(answerer.workbench, DuetWorkbench)
    proxy = answerer.workbench.client_tool("kb.lookup")
    assert isinstance(proxy, ProxyTool) and proxy.schema["parameters"] == LOOKUP["function"]["parameters"]
    dumped = team.dump_component().model_dump(mode="json")
    if studio:  # AutoGen's stock client describes itself in its own words when dumped; nothing else changes
        exported = copy.deepcopy(document)
        for tree in (dumped, exported):
            for participant in tree["config"]["participants"]:
                participant["config"]["model_client"].pop("description")
        assert dumped == exported
    else:
        assert dumped == document
    if studio:
        assert [p["config"]["tools"][0]["provider"] for p in document["config"]["participants"]] == ["duet.workbenches.ProxyTool"] * 2
        assert answerer.model_client.__class__.__name__ == "OpenAIChatCompletionClient"
    else:
        assert all("workbench" in p["config"] for p in document["config"]["participants"])
        assert isinstance(answerer.model_client, OpenAICompatibleClient)


def test_components_load_one_by_one() -> None:
    proxy = ProxyTool("a.b", "desc", {"type": "object", "properties": {"x": {"type": "integer"}}})
    assert BaseTool.load_component(json.loads(proxy.dump_component().model_dump_json())).schema == proxy.schema
    workbench = DuetWorkbench([proxy])
    loaded = Workbench.load_component(json.loads(workbench.dump_component().model_dump_json()))
    assert isinstance(loaded, DuetWorkbench) and loaded.client_tool("a.b") is not None
    client = OpenAICompatibleClient("m", "http://127.0.0.1:1/v1", api_key_env="K")
    assert isinstance(ChatCompletionClient.load_component(client.dump_component()), OpenAICompatibleClient)


def test_loaded_team_runs_in_agentchat_without_duet(upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """What AutoGen Studio does with the file: load it and ``run_stream`` it like any team."""
    monkeypatch.setenv("OPENAI_API_KEY", "not-needed")
    upstream.script(REASONER, Reply(reasoning=["The tool ", "has it."]))
    upstream.script(ANSWER, Reply(content=["Looking."], tool_calls=[ScriptedCall(model_safe_name("kb.lookup"), '{"query": "duet"}')]))
    document = export_team(settings(upstream), client_tools=proxy_tools_from_openai([LOOKUP]), studio=True)

    async def main() -> Any:
        team = Team.load_component(document)
        return await team.run(task="Look up duet")

    result = asyncio.run(main())
    texts = [m for m in result.messages if isinstance(m, TextMessage)]
    assert texts[1].source == "reasoner" and texts[1].content == "The tool has it."
    handoff = result.messages[-1]
    assert isinstance(handoff, HandoffMessage) and handoff.target == "client"
    assert "Handoff to client" in (result.stop_reason or "")


@pytest.fixture(scope="module")
def team_file(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("team") / "team.json"
    path.write_text(json.dumps(export_team(settings(upstream), client_tools=proxy_tools_from_openai([LOOKUP]))))
    return path


@pytest.fixture(scope="module")
def team_duet(team_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    server = DuetServer(["--team", str(team_file), "--model-name", "studio-duet"],
                        {"DUET_API_KEYS": API_KEY, "UPSTREAM_KEY": "upstream-secret", "DUET_PING_INTERVAL": "0.3"},
                        tmp_path_factory.mktemp("team-log") / "duet.log")
    yield server
    server.stop()


def test_team_file_pipeline_shares_its_clients(team_file: Path, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """A team file is served as a settings pipeline is: concurrent runs use the model clients the
    pipeline created once (Duet's own, made for concurrent use), and usage is reported. (The lean
    runtime and the teams themselves: tests/unit/agents/pipeline/.)"""
    monkeypatch.setenv("UPSTREAM_KEY", "upstream-secret")

    async def main() -> tuple[list[Any], list[Any]]:
        async with Duet.from_team(team_file) as duet:
            return await asyncio.gather(*(duet.run(QUESTION) for _ in range(4))), duet.model_clients

    results, clients = asyncio.run(main())
    assert [r.content for r in results] == ["echo: Look up duet"] * 4 and all(r.prompt_tokens and r.completion_tokens for r in results)
    assert len(clients) == 2 and all(isinstance(client, OpenAICompatibleClient) for client in clients)
    # Every run's model calls went through these two clients.
    assert sum(client.total_usage().prompt_tokens for client in clients) == sum(r.prompt_tokens for r in results)
    assert sum(client.total_usage().completion_tokens for client in clients) == sum(r.completion_tokens for r in results)
    assert len(upstream.requests) == 8


def test_serve_team_round_trip(team_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    client = openai.OpenAI(base_url=f"{team_duet.base_url}/v1", api_key=API_KEY, max_retries=0)
    assert [m.id for m in client.models.list()] == ["studio-duet"]
    weather = tool("get_weather")
    upstream.script(REASONER, Reply(reasoning=["plan"]))
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("get_weather", '{"query": "Paris"}'), ScriptedCall("get_weather", '{"query": "Rome"}')],
                                  interleave_calls=True))
    with client.chat.completions.stream(model="studio-duet", messages=QUESTION, tools=[weather]) as stream:
        first = stream.get_final_completion()
    message = first.choices[0].message
    assert message.model_extra["reasoning_content"] == "plan"
    assert [json.loads(c.function.arguments)["query"] for c in message.tool_calls] == ["Paris", "Rome"]
    # The request's tools replace the file's client tools; its system message and key still apply.
    sent = upstream.requests_for(ANSWER)[0]
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["get_weather"]
    assert sent.body["messages"][0]["content"].startswith("Be exact.") and sent.headers["authorization"] == "Bearer upstream-secret"

    upstream.script(ANSWER, lambda body: Reply(content=["Both: ", " & ".join(m["content"] for m in body["messages"] if m["role"] == "tool")]))
    history = [*QUESTION, message.model_dump(exclude_none=True),
               *({"role": "tool", "tool_call_id": c.id, "content": f"{i}C"} for i, c in enumerate(message.tool_calls))]
    final = client.chat.completions.create(model="studio-duet", messages=history, tools=[weather])
    assert final.choices[0].message.content == "Both: 0C & 1C"


def test_serve_team_errors_and_cancellation(team_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    # A reasoner that is down costs the reasoning, not the answer (issue 26: reasoner.on_failure, answer_alone by default).
    upstream.script(REASONER, Reply(status=500, error_message="reasoner down"))
    response = httpx.post(f"{team_duet.base_url}/v1/chat/completions", json={"model": "studio-duet", "messages": QUESTION}, headers=headers)
    assert response.status_code == 200 and "reasoner down" in response.json()["choices"][0]["message"]["reasoning_content"]
    upstream.script(ANSWER, *[Reply(status=500, error_message="answer down")] * 3)  # the first try and two retries
    response = httpx.post(f"{team_duet.base_url}/v1/chat/completions", json={"model": "studio-duet", "messages": QUESTION}, headers=headers)
    assert response.status_code == 502 and "answer down" in response.json()["error"]["message"]

    upstream.script(REASONER, Reply(reasoning=[f"step {i} " for i in range(40)], delay_between=0.25))
    with httpx.stream("POST", f"{team_duet.base_url}/v1/chat/completions", headers=headers, timeout=30,
                      json={"model": "studio-duet", "stream": True, "messages": QUESTION}) as stream:
        next(line for line in stream.iter_lines() if "reasoning_content" in line)
    call = upstream.requests_for(REASONER)[-1]
    assert call.ended.wait(5) and call.aborted
    assert team_duet.wait_idle()["in_flight"] == 0

    upstream.script(ANSWER, Reply(content=["fine"]))
    raw = httpx.post(f"{team_duet.base_url}/v1/chat/completions", headers=headers,
                     json={"model": "studio-duet", "stream": True, "messages": QUESTION}).content
    assert sse_events(raw)[-1] == "[DONE]"


def test_broken_team_file_names_the_provider(team_file: Path, tmp_path: Path) -> None:
    document = json.loads(team_file.read_text())
    document["config"]["participants"][1]["config"]["model_client"]["provider"] = "no_such_package.FancyClient"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document))
    result = subprocess.run([DUET, "serve", "--team", str(broken)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2
    assert "provider 'no_such_package.FancyClient' (model) cannot be imported" in result.stderr

    document = json.loads(team_file.read_text())
    document["config"]["participants"][0]["config"]["reason_on_tool_results"] = "sometimes"
    broken.write_text(json.dumps(document))
    result = subprocess.run([DUET, "serve", "--team", str(broken)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2 and "provider 'duet.agents.ReasoningAgent' (agent) failed to load" in result.stderr


def test_export_team_command(tmp_path: Path, upstream: ScriptedUpstream) -> None:
    config = tmp_path / "duet.yaml"
    config.write_text(json.dumps({"pipelines": [{"name": "a", "answer": {"model": "m1"}},
                                                {"name": "b", "reasoner": {"model": "r1"}, "answer": {"model": "m2"}}]}))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([LOOKUP]))
    output = tmp_path / "team.json"
    subprocess.run([DUET, "export-team", "--config", str(config), "--pipeline", "b", "--tools", str(tools), "-o", str(output)],
                   check=True, timeout=60, cwd=ROOT, capture_output=True)
    document = json.loads(output.read_text())
    assert [p["config"]["name"] for p in document["config"]["participants"]] == ["reasoner", "answerer"]
    tool_names = [t["config"]["name"] for t in document["config"]["participants"][1]["config"]["workbench"]["config"]["tools"]]
    assert tool_names == ["kb.lookup"]
    duet = Duet.from_team(output)  # loads and is ready to serve
    assert duet.service_tool_names == set()
