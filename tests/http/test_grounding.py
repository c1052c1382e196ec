"""Search before thinking: a pipeline's grounding tools run on the user's question before the reasoner.

The search service is a loopback HTTP server that speaks Tavily's request and response shapes
(``POST /search`` with a bearer key, ``{"query", "max_results"}`` in, ``{"query", "answer",
"results": [{"title", "url", "content", "score"}]}`` out) and SearXNG's JSON (``GET /searx?q=...``);
Duet calls it through HTTP tools configured as the manual shows (docs/configuration.md).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import yaml
from autogen_agentchat.base import Team

from duet.agents import AnswerSettings, Duet, GroundingSettings, PipelineSettings, ReasonerSettings, export_team
from duet.api import EnvSettings
from duet.workbenches import ToolsSettings
from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, sse_events, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

TAVILY_KEY = "tvly-test-0a1b2c3d"
QUESTION = "Who won the 2026 chess olympiad?"
RESULTS = [
    {"title": "Olympiad results", "url": "https://a.example/olympiad", "content": "Team A won the open section.", "score": 0.9},
    {"title": "Final round report", "url": "https://b.example/final", "content": "A close final round.", "score": 0.8},
    {"title": "Standings", "url": "https://c.example/standings", "content": "Team A 19 points.", "score": 0.7},
]


class SearchService:
    """What the loopback search server was asked, and when (start and end of each request)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.answering = 0

    def begin(self) -> None:
        with self.lock:
            self.answering += 1

    def record(self, call: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(call)
            self.answering -= 1

    def clear(self, timeout: float = 10.0) -> None:
        """Forgets the calls once no request is being answered: a slow search an earlier test started
        (and Duet gave up on) would otherwise land in the next test's calls."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if not self.answering:
                    self.calls.clear()
                    return
            time.sleep(0.05)
        raise AssertionError(f"the search server still answers an earlier request after {timeout} s")


def search_handler(service: SearchService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except BrokenPipeError:  # Duet gave up on a slow search: as it should
                pass

        def _behave(self, query: str) -> tuple[int, list[dict[str, Any]]]:
            if "slow" in query:
                time.sleep(3)
            if "concurrent" in query:
                time.sleep(0.6)
            if "broken" in query:
                return 500, []
            if "big" in query:
                return 200, [{**result, "content": "x" * 2000} for result in RESULTS]
            return 200, RESULTS

        def do_POST(self) -> None:  # Tavily's search API
            service.begin()
            start = time.monotonic()
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
            status, results = self._behave(body.get("query", ""))
            service.record({"api": "tavily", "body": body, "authorization": self.headers.get("authorization"),
                            "start": start, "end": time.monotonic()})
            if status != 200:
                self._answer(status, {"detail": {"error": "search backend failed"}})
                return
            self._answer(200, {"query": body.get("query"), "answer": None, "images": [],
                               "results": results[: body.get("max_results", 5)], "response_time": 0.01})

        def do_GET(self) -> None:  # SearXNG's JSON format
            service.begin()
            start = time.monotonic()
            query = parse_qs(urlsplit(self.path).query).get("q", [""])[0]
            status, results = self._behave(query)
            service.record({"api": "searxng", "query": query, "start": start, "end": time.monotonic()})
            self._answer(status, {"query": query, "number_of_results": len(results),
                                  "results": [{"title": r["title"], "url": r["url"], "content": r["content"], "engine": "x"} for r in results]})

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def search() -> Iterator[tuple[str, SearchService]]:
    service = SearchService()
    server = ThreadingHTTPServer(("127.0.0.1", 0), search_handler(service))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", service
    server.shutdown()


def search_tools(search_url: str) -> dict[str, Any]:
    """The Tavily and SearXNG HTTP tools, as the manual configures them (the key from the environment)."""
    return {"http": [
        {"name": "web_search", "description": "Search the web (Tavily).", "url": f"{search_url}/search", "method": "POST",
         "headers": {"Authorization": "Bearer ${TAVILY_API_KEY}"},
         "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "max_results": {"type": "integer"}},
                        "required": ["query"]}, "timeout": 20},
        {"name": "searx_search", "description": "Search the web (SearXNG).", "url": f"{search_url}/searx", "method": "GET",
         "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "format": {"type": "string"}}, "required": ["q"]}},
    ]}


def grounded_config(upstream: ScriptedUpstream, search_url: str) -> dict[str, Any]:
    reasoner = {"base_url": upstream.base_url, "model": REASONER}
    answer = {"base_url": upstream.base_url, "model": ANSWER}
    grounding = {"tools": ["web_search"], "arguments": {"query": "{last_user_text}", "max_results": 3}, "timeout": 1.5, "max_chars": 800}
    pipeline = {"reasoner": reasoner, "answer": answer, "tools": search_tools(search_url), "grounding": grounding}
    return {"ping_interval": 0.3, "pipelines": [
        {"name": "grounded", **pipeline},
        {"name": "grounded-think", **pipeline, "reasoning_output": "think"},
        {"name": "grounded-hidden", **pipeline, "reasoning_output": "hidden"},
        {"name": "grounded-both", **pipeline, "grounding": {"tools": ["web_search", "searx_search"], "timeout": 5}},
        {"name": "grounded-no-client-tools", **pipeline, "grounding": {**grounding, "when": "no_client_tools"}},
        {"name": "answer-grounded", "answer": answer, "tools": search_tools(search_url), "grounding": grounding},
    ]}


@pytest.fixture(scope="module")
def grounded(upstream: ScriptedUpstream, search: tuple[str, SearchService], tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory = tmp_path_factory.mktemp("grounded")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump(grounded_config(upstream, search[0])))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY, "TAVILY_API_KEY": TAVILY_KEY}, directory / "duet.log")
    yield server
    server.stop()


@pytest.fixture
def http(grounded: DuetServer, search: tuple[str, SearchService]) -> Iterator[httpx.Client]:
    search[1].clear()
    with httpx.Client(base_url=grounded.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
        yield client


def system_of(upstream: ScriptedUpstream, model: str, index: int = -1) -> str:
    """What a model was told besides the conversation: the reasoner's system message; for the answer model,
    also the note after the user's message (the retrieved context and the reasoning go there: issue 26)."""
    messages = upstream.requests_for(model)[index].body["messages"]
    if model == REASONER:
        return str(messages[0]["content"])
    return "\n".join(str(m["content"]) for m in messages if m["role"] in ("system", "user"))


def test_search_runs_before_thinking_and_reaches_both_models(http: httpx.Client, upstream: ScriptedUpstream,
                                                            search: tuple[str, SearchService]) -> None:
    upstream.script(REASONER, Reply(reasoning=["Team A, per the results."]))
    upstream.script(ANSWER, Reply(content=["Team A won."]))
    reply = http.post("/v1/chat/completions", json={"model": "grounded", "stream": True, "messages": [{"role": "user", "content": QUESTION}]})
    deltas = [e["choices"][0]["delta"] for e in sse_events(reply.content) if e != "[DONE]" and e["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    assert reasoning == (f"[searching: {QUESTION}]\n[web_search: 3 results: Olympiad results (a.example); "
                         "Final round report (b.example); Standings (c.example)]"
                         "\n\nTeam A, per the results.")  # the reasoner's thinking follows, a paragraph apart
    assert "".join(d.get("content") or "" for d in deltas) == "Team A won."
    [call] = search[1].calls
    assert call["body"] == {"query": QUESTION, "max_results": 3} and call["authorization"] == f"Bearer {TAVILY_KEY}"
    for model in (REASONER, ANSWER):  # both models read the results, marked as retrieved context, with their sources
        system = system_of(upstream, model)
        assert "<retrieved_context>\nResults of web_search:\n[1] Olympiad results — https://a.example/olympiad\nTeam A won the open section." in system
    assert "tools" not in upstream.requests_for(REASONER)[0].body  # the reasoner still calls nothing


@pytest.mark.parametrize(("model", "shown"), [("grounded-think", "content"), ("grounded-hidden", None)])
def test_progress_in_each_output_mode(http: httpx.Client, upstream: ScriptedUpstream, model: str, shown: str | None) -> None:
    upstream.script(REASONER, Reply(reasoning=["Plan."]))
    upstream.script(ANSWER, Reply(content=["Team A."]))
    message = http.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": QUESTION}]}).json()["choices"][0]["message"]
    if shown == "content":
        assert message["content"].startswith(f"<think>\n[searching: {QUESTION}]\n[web_search: 3 results:")
        assert message["content"].endswith("Plan.\n</think>\n\nTeam A.")
    else:
        assert message["content"] == "Team A." and "reasoning_content" not in message
    assert "<retrieved_context>" in system_of(upstream, REASONER)  # hidden from the client, not from the models


@pytest.mark.parametrize(("question", "why"), [("broken search", "search backend failed"), ("slow search", "no answer within 1.5 s")])
def test_a_failed_or_slow_search_never_fails_the_request(http: httpx.Client, upstream: ScriptedUpstream, question: str, why: str) -> None:
    upstream.script(REASONER, Reply(reasoning=["From memory."]))
    upstream.script(ANSWER, Reply(content=["My best guess."]))
    started = time.monotonic()
    reply = http.post("/v1/chat/completions", json={"model": "grounded", "messages": [{"role": "user", "content": question}]})
    assert reply.status_code == 200 and time.monotonic() - started < 1.5 + 1.5
    message = reply.json()["choices"][0]["message"]
    assert message["content"] == "My best guess."
    assert "[web_search failed: " in message["reasoning_content"] and "reasoning goes on without it]" in message["reasoning_content"]
    assert why in message["reasoning_content"]
    assert "web_search: no results (" in system_of(upstream, REASONER)  # the models know the search failed


def test_the_follow_up_does_not_search_again(http: httpx.Client, upstream: ScriptedUpstream, search: tuple[str, SearchService]) -> None:
    """The results belong to the round's hidden part: the follow-up with the client's tool result gets them back."""
    calendar = tool("add_to_calendar", "Adds an event.", {"title": {"type": "string"}})
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("add_to_calendar", '{"title": "Olympiad final"}')]))
    first = http.post("/v1/chat/completions", json={"model": "grounded", "messages": [{"role": "user", "content": QUESTION}], "tools": [calendar]})
    [call] = first.json()["choices"][0]["message"]["tool_calls"]
    upstream.script(ANSWER, Reply(content=["Added; Team A won."]))
    follow_up = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": "added"}]
    second = http.post("/v1/chat/completions", json={"model": "grounded", "messages": follow_up, "tools": [calendar]})
    assert second.json()["choices"][0]["message"]["content"] == "Added; Team A won."
    assert len(search[1].calls) == 1  # searched once, for the round's user message
    assert "[1] Olympiad results — https://a.example/olympiad" in system_of(upstream, ANSWER)  # restored for the follow-up
    assert "[searching" not in (second.json()["choices"][0]["message"].get("reasoning_content") or "")


def test_results_passed_on_are_capped(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    http.post("/v1/chat/completions", json={"model": "grounded", "messages": [{"role": "user", "content": "big news"}]})
    context = system_of(upstream, REASONER).split("<retrieved_context>\n", 1)[1].split("\n</retrieved_context>", 1)[0]
    assert context.endswith("\n[… cut at 800 characters]") and len(context) == 800 + len("\n[… cut at 800 characters]")


def test_several_tools_run_concurrently_with_default_arguments(http: httpx.Client, upstream: ScriptedUpstream,
                                                              search: tuple[str, SearchService]) -> None:
    """Without an arguments template each tool gets the last user text as its first required string argument."""
    reply = http.post("/v1/chat/completions", json={"model": "grounded-both", "messages": [{"role": "user", "content": "concurrent search"}]})
    assert reply.status_code == 200
    calls = [c for c in search[1].calls if "concurrent search" in (c.get("query") or c.get("body", {}).get("query", ""))]
    tavily, searx = sorted(calls, key=lambda call: call["api"] != "tavily")
    assert tavily["body"]["query"] == "concurrent search" and searx["query"] == "concurrent search"
    assert tavily["start"] < searx["end"] and searx["start"] < tavily["end"]  # both ran at once (0.6 s each)
    system = system_of(upstream, REASONER)
    assert "Results of web_search:\n[1] Olympiad results" in system and "Results of searx_search:\n[1] Olympiad results" in system


def test_no_client_tools_mode(http: httpx.Client, upstream: ScriptedUpstream, search: tuple[str, SearchService]) -> None:
    """``when: no_client_tools``: a client with tools of its own (a Dify agent with a search tool) searches itself."""
    messages = [{"role": "user", "content": QUESTION}]
    http.post("/v1/chat/completions", json={"model": "grounded-no-client-tools", "messages": messages, "tools": [tool("lookup")]})
    assert search[1].calls == [] and "<retrieved_context>" not in system_of(upstream, REASONER)
    http.post("/v1/chat/completions", json={"model": "grounded-no-client-tools", "messages": messages})
    assert len(search[1].calls) == 1


def test_an_answer_model_alone_is_grounded_too(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(content=["Team A."]))
    message = http.post("/v1/chat/completions", json={"model": "answer-grounded", "messages": [{"role": "user", "content": QUESTION}]}).json()
    assert message["choices"][0]["message"]["reasoning_content"].startswith("[searching: ")
    assert "[1] Olympiad results" in system_of(upstream, ANSWER) and upstream.requests_for(REASONER) == []


def test_an_exported_team_keeps_its_grounding(upstream: ScriptedUpstream, search: tuple[str, SearchService],
                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The grounding agent is a component: the exported team holds it first, and the team served
    from the file searches before thinking."""
    monkeypatch.setenv("TAVILY_API_KEY", TAVILY_KEY)
    settings = PipelineSettings(
        reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER), answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER),
        tools=ToolsSettings.model_validate(search_tools(search[0])),
        grounding=GroundingSettings(tools=["web_search"], arguments={"query": "{last_user_text}", "max_results": 2}, timeout=4),
    )
    services = Duet.from_settings(settings).services.tools
    document = export_team(settings, service_tools=services)
    grounder = document["config"]["participants"][0]
    assert grounder["provider"] == "duet.agents.GroundingAgent"
    assert grounder["config"]["tools"] == ["web_search"] and grounder["config"]["arguments"]["max_results"] == 2
    assert Team.load_component(document).dump_component().model_dump(mode="json") == document  # survives the round trip
    path = tmp_path / "team.json"
    path.write_text(json.dumps(document))
    search[1].clear()
    upstream.script(ANSWER, Reply(content=["Team A."]))

    async def run() -> str:
        async with Duet.from_team(path) as duet:
            result = await duet.run([{"role": "user", "content": QUESTION}])
            return result.reasoning

    reasoning = asyncio.run(run())
    assert reasoning.startswith(f"[searching: {QUESTION}]\n[web_search: 2 results:")
    assert [call["body"] for call in search[1].calls] == [{"query": QUESTION, "max_results": 2}]


def test_grounding_of_the_default_pipeline_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_FUNCTION_TOOLS", "tests.service_tools_fixtures:lookup_customer")
    monkeypatch.setenv("DUET_GROUNDING_TOOLS", "lookup_customer")
    pipeline = EnvSettings().default_pipeline()
    assert pipeline.grounding is not None and pipeline.grounding.tools == ["lookup_customer"]
    assert export_team(pipeline)["config"]["participants"][0]["config"]["tools"] == ["lookup_customer"]
    monkeypatch.setenv("DUET_GROUNDING_TOOLS", "no_such_tool")
    with pytest.raises(ValueError, match="grounding names no_such_tool, which is not among its service tools"):
        Duet.from_settings(EnvSettings().default_pipeline())
