"""Tools Duet runs itself — Python functions, MCP servers, HTTP tools — beside the client's tools,
and mixed rounds whose hidden part survives the round trip (SQLite, and Redis shared by replicas)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import openai
import pytest
import yaml

from tests.conftest import ANSWER, API_KEY, REASONER, ROOT, DuetServer, free_port, sse_events, stop_process, tool, wait_for_port
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from tests.waiting import eventually, process_ended

QUESTION = [{"role": "user", "content": "Who is a@b.c?"}]
NOTIFY = tool("notify_user", "Shows a notification in the client app.", {"message": {"type": "string"}})


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def answer_from_results(body: dict[str, Any]) -> Reply:
    return Reply(content=["Results: ", " | ".join(tool_results(body))])


class WeatherHandler(BaseHTTPRequestHandler):
    """The loopback HTTP service behind the HTTP tool."""

    def do_GET(self) -> None:  # http.server's naming
        url = urlsplit(self.path)
        city = url.path.rsplit("/", 1)[-1]
        units = parse_qs(url.query).get("units", ["metric"])[0]
        body = json.dumps({"city": city, "temperature": 18 if units == "metric" else 64, "units": units}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def weather_service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), WeatherHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def mcp_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The test MCP server over streamable HTTP, in its own process."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "tests.mcp_server", "--http", str(port)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port)
    yield f"http://127.0.0.1:{port}/mcp"
    stop_process(process)


def services_config(upstream: ScriptedUpstream, weather_url: str, mcp_url: str, pid_file: Path) -> dict[str, Any]:
    reasoner = {"base_url": upstream.base_url, "model": REASONER}
    answer = {"base_url": upstream.base_url, "model": ANSWER}
    tools = {
        "functions": ["tests.service_tools_fixtures"],
        "mcp": [
            {"name": "calc", "command": sys.executable, "args": ["-m", "tests.mcp_server"], "cwd": str(ROOT),
             "env": {"MCP_PID_FILE": str(pid_file), "PYTHONPATH": str(ROOT)}},
        ],
        "http": [
            {"name": "weather", "description": "Weather for a city.", "url": f"{weather_url}/weather/{{city}}", "method": "GET",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "units": {"type": "string"}}, "required": ["city"]}},
        ],
    }
    return {
        "ping_interval": 0.3,
        "pipelines": [
            {"name": "duet-services", "reasoner": reasoner, "answer": answer, "tools": tools},
            {"name": "duet-remote-mcp", "answer": {**answer, "max_tool_rounds": 3},
             "tools": {"mcp": [{"name": "remote", "url": mcp_url}]}},
        ],
    }


@pytest.fixture(scope="module")
def services(upstream: ScriptedUpstream, weather_service: str, mcp_http: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory = tmp_path_factory.mktemp("services")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump(services_config(upstream, weather_service, mcp_http, directory / "mcp.pid")))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY}, directory / "duet.log")
    server.pid_file = directory / "mcp.pid"  # type: ignore[attr-defined]
    yield server
    server.stop()


@pytest.fixture
def sdk(services: DuetServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{services.base_url}/v1", api_key=API_KEY, max_retries=0)


def test_python_function_tool(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("lookup_customer", '{"email": "a@b.c"}')]), answer_from_results)
    reasoning = ""
    with sdk.chat.completions.stream(model="duet-services", messages=QUESTION, user="agent-7") as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                reasoning += (event.chunk.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason == "stop" and not final.choices[0].message.tool_calls  # run here, not by the client
    assert '[calling lookup_customer {"email": "a@b.c"}]' in reasoning and "[lookup_customer returned]" in reasoning
    result = json.loads(final.choices[0].message.content.removeprefix("Results: "))
    assert result["name"] == "Ada" and result["asked_by"] == "agent-7" and result["pipeline"] == "duet-services"
    assert result["request_id"].startswith("chatcmpl-") and result["thread"] == "worker"  # sync code ran off the event loop

    first = upstream.requests_for(ANSWER)[0].body
    schema = next(t["function"] for t in first["tools"] if t["function"]["name"] == "lookup_customer")
    assert schema["description"] == "Finds a customer by e-mail."
    assert schema["parameters"]["properties"] == {"email": {"description": "The customer's e-mail address", "title": "Email", "type": "string"}}
    assert "_context" not in json.dumps(schema) and "_secret" not in json.dumps(schema)
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"lookup_customer", "slow_report", "explode", "add", "shout", "weather"} <= names and "not_marked" not in names
    # The reasoning model was told about the service tools too.
    assert "lookup_customer" in upstream.requests_for(REASONER)[0].body["messages"][0]["content"]


def test_failing_and_slow_tools_become_errors_the_model_reads(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("explode", '{"reason": "test"}'), ScriptedCall("slow_report", "{}")]),
                    answer_from_results)
    started = time.monotonic()
    final = sdk.chat.completions.create(model="duet-services", messages=QUESTION)
    assert time.monotonic() - started < 2.5  # the 3 s function was cut at its 0.5 s timeout
    assert final.choices[0].message.content == "Results: boom: test | slow_report did not finish within 0.5s"
    second = upstream.requests_for(ANSWER)[1].body["messages"]
    assert [m["tool_call_id"] for m in second if m["role"] == "tool"] == [c["id"] for c in second[-3]["tool_calls"]]


def test_http_tool(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("weather", '{"city": "Paris", "units": "imperial"}')]), answer_from_results)
    final = sdk.chat.completions.create(model="duet-services", messages=QUESTION)
    assert json.loads(final.choices[0].message.content.removeprefix("Results: ")) == {"city": "Paris", "temperature": 64, "units": "imperial"}


def test_mcp_stdio_server_and_its_restart(sdk: openai.OpenAI, services: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("add", '{"a": 2, "b": 3}')]), answer_from_results)
    assert sdk.chat.completions.create(model="duet-services", messages=QUESTION).choices[0].message.content == "Results: 5"
    health = services.health()["mcp_servers"]["duet-services"]["calc"]
    assert health["status"] == "running"

    pid_file: Path = services.pid_file  # type: ignore[attr-defined]
    old_pid = int(pid_file.read_text())
    subprocess.run(["kill", str(old_pid)], check=True)  # the server dies, by its PID
    eventually(lambda: process_ended(old_pid), f"the MCP server (PID {old_pid}) ends")
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("shout", '{"text": "hi"}')]), answer_from_results)
    failed = sdk.chat.completions.create(model="duet-services", messages=QUESTION)
    assert failed.choices[0].message.content.startswith("Results: MCP server 'calc'")  # a clean tool error, not a crash

    deadline = time.monotonic() + 20
    while services.health()["mcp_servers"]["duet-services"]["calc"]["restarts"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    status = services.health()["mcp_servers"]["duet-services"]["calc"]
    assert status["status"] == "running" and status["restarts"] == 1 and status["last_error"]
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("shout", '{"text": "hi"}')]), answer_from_results)
    again = sdk.chat.completions.create(model="duet-services", messages=QUESTION).choices[0].message.content
    assert again.startswith("Results: HI (pid ") and str(old_pid) not in again
    assert "MCP server 'calc' died" in services.log.read_text()


def test_mcp_streamable_http_server(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("add", '{"a": 40, "b": 2}')]), answer_from_results)
    assert sdk.chat.completions.create(model="duet-remote-mcp", messages=QUESTION).choices[0].message.content == "Results: 42"


def test_service_rounds_are_bounded(http_services: httpx.Client, upstream: ScriptedUpstream) -> None:
    """A model that never stops calling tools is offered no service tools after max_tool_rounds (3)."""
    upstream.set_default(lambda body: Reply(content=["done"]) if "tools" not in body
                         else Reply(tool_calls=[ScriptedCall("add", '{"a": 1, "b": 1}')]))
    completion = http_services.post("/v1/chat/completions", json={"model": "duet-remote-mcp", "messages": QUESTION}).json()
    assert completion["choices"][0]["message"]["content"] == "done"
    assert [len(r.body.get("tools", [])) for r in upstream.requests_for(ANSWER)] == [2, 2, 2, 0]


def test_a_model_that_insists_still_gets_an_answer_out(http_services: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Even when the model calls a service tool it was no longer offered, the request ends in a reply."""
    upstream.set_default(lambda body: Reply(content=["partial"], tool_calls=[ScriptedCall("add", '{"a": 1, "b": 1}')]))
    response = http_services.post("/v1/chat/completions", json={"model": "duet-remote-mcp", "messages": QUESTION})
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "\n\n".join(["partial"] * 4)
    assert response.json()["choices"][0]["finish_reason"] == "stop"


@pytest.fixture
def http_services(services: DuetServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=services.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
        yield client


def test_client_tool_shadows_a_service_tool(http_services: httpx.Client, services: DuetServer, upstream: ScriptedUpstream) -> None:
    mine = tool("lookup_customer", "The client's own lookup.")
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("lookup_customer", '{"query": "x"}')]))
    completion = http_services.post("/v1/chat/completions", json={"model": "duet-services", "messages": QUESTION, "tools": [mine]}).json()
    [call] = completion["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "lookup_customer"  # returned to the client, not run here
    sent = [t["function"] for t in upstream.requests_for(ANSWER)[0].body["tools"] if t["function"]["name"] == "lookup_customer"]
    assert sent == [mine["function"]]
    assert "client tool 'lookup_customer' shadows the service tool" in services.log.read_text()


# -- mixed rounds ----------------------------------------------------------------------------------


def mixed_round(upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Look the customer up, then notify."]))
    upstream.script(ANSWER, Reply(content=["Working."], tool_calls=[ScriptedCall("lookup_customer", '{"email": "a@b.c"}'),
                                                                 ScriptedCall("notify_user", '{"message": "found"}')]))


def follow_up(first: dict[str, Any]) -> list[dict[str, Any]]:
    message = first["choices"][0]["message"]
    return [*QUESTION, {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]},
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "notified"}]


def assert_whole_round_restored(body: dict[str, Any]) -> None:
    """The answer model of the follow-up sees the round as it made it: both calls, both results, the reasoning."""
    messages = body["messages"]
    assistant = next(m for m in messages if m.get("tool_calls"))
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["lookup_customer", "notify_user"]
    results = [m for m in messages if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in assistant["tool_calls"]]
    assert json.loads(results[0]["content"])["name"] == "Ada" and results[1]["content"] == "notified"
    # The reasoning follows the user's message it was about (issue 26).
    assert "Look the customer up, then notify." in next(m for m in reversed(messages) if m["role"] == "user")["content"]


def test_mixed_round_with_sqlite_state(http_services: httpx.Client, upstream: ScriptedUpstream) -> None:
    mixed_round(upstream)
    first = http_services.post("/v1/chat/completions", json={"model": "duet-services", "messages": QUESTION, "tools": [NOTIFY]}).json()
    calls = first["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["notify_user"]  # the client sees only its own tool
    assert first["choices"][0]["finish_reason"] == "tool_calls"

    upstream.script(ANSWER, answer_from_results)
    second = http_services.post("/v1/chat/completions", json={"model": "duet-services", "messages": follow_up(first), "tools": [NOTIFY]})
    assert second.status_code == 200
    assert len(upstream.requests_for(REASONER)) == 1  # not re-run: the stored reasoning was used
    assert_whole_round_restored(upstream.requests_for(ANSWER)[1].body)


def test_mixed_round_streamed_to_the_openai_sdk(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    mixed_round(upstream)
    with sdk.chat.completions.stream(model="duet-services", messages=QUESTION, tools=[NOTIFY]) as stream:
        first = stream.get_final_completion()
    assert [c.function.name for c in first.choices[0].message.tool_calls] == ["notify_user"]
    upstream.script(ANSWER, answer_from_results)
    sdk.chat.completions.create(model="duet-services", messages=follow_up(first.model_dump()), tools=[NOTIFY])
    assert_whole_round_restored(upstream.requests_for(ANSWER)[1].body)


def test_follow_up_without_saved_state_still_works(http_services: httpx.Client, services: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, answer_from_results)
    history = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789abcdef01234567", "type": "function", "function": {"name": "notify_user", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_0123456789abcdef01234567", "content": "notified"}]
    response = http_services.post("/v1/chat/completions", json={"model": "duet-services", "messages": history, "tools": [NOTIFY]})
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "Results: notified"
    assert "no saved state for tool calls call_0123456789abcdef01234567" in services.log.read_text()


# -- Redis, shared by two replicas ------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required (the README's test command installs it)"
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(tmp_path_factory.mktemp("redis"))], stdout=subprocess.DEVNULL)
    wait_for_port(port)
    yield f"redis://127.0.0.1:{port}/0"
    stop_process(process)


@pytest.fixture(scope="module")
def replicas(upstream: ScriptedUpstream, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[DuetServer]]:
    directory = tmp_path_factory.mktemp("replicas")
    config = directory / "duet.yaml"
    reasoner = {"base_url": upstream.base_url, "model": REASONER}
    answer = {"base_url": upstream.base_url, "model": ANSWER}
    config.write_text(yaml.safe_dump({"pipelines": [{"name": "duet-services", "reasoner": reasoner, "answer": answer,
                                                       "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}}]}))
    servers = [DuetServer(["--config", str(config)], {"DUET_STATE_URL": redis_url}, directory / f"duet-{i}.log") for i in range(2)]
    yield servers
    for server in servers:
        server.stop()


def test_mixed_round_across_replicas_with_redis(replicas: list[DuetServer], upstream: ScriptedUpstream, redis_url: str) -> None:
    first_replica, second_replica = replicas
    mixed_round(upstream)
    first = httpx.post(f"{first_replica.base_url}/v1/chat/completions", timeout=30,
                       json={"model": "duet-services", "messages": QUESTION, "tools": [NOTIFY]}).json()
    call_id = first["choices"][0]["message"]["tool_calls"][0]["id"]
    import redis

    client = redis.Redis.from_url(redis_url)
    assert 0 < client.ttl(f"duet:continuation:duet-services:{call_id}") <= 24 * 3600  # stored in Redis (per pipeline), and it expires
    upstream.script(ANSWER, answer_from_results)
    raw = httpx.post(f"{second_replica.base_url}/v1/chat/completions", timeout=30,
                     json={"model": "duet-services", "stream": True, "messages": follow_up(first), "tools": [NOTIFY]}).content
    assert sse_events(raw)[-1] == "[DONE]"
    assert_whole_round_restored(upstream.requests_for(ANSWER)[1].body)


def test_exported_team_carries_the_service_tools(services: DuetServer, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """``duet export-team`` writes functions, HTTP and MCP tools into the team; ``serve --team`` runs them."""
    config = next(services.process.args[i + 1] for i, a in enumerate(services.process.args) if a == "--config")  # type: ignore[union-attr]
    team_file = tmp_path / "team.json"
    subprocess.run([sys.executable, "-m", "duet.api", "export-team", "--config", config, "--pipeline", "duet-services", "-o", str(team_file)],
                   cwd=ROOT, check=True, capture_output=True, timeout=120)
    workbench = json.loads(team_file.read_text())["config"]["participants"][1]["config"]["workbench"]
    providers = {t["config"].get("name") or t["config"].get("function"): t["provider"] for t in workbench["config"]["tools"]}
    assert providers["tests.service_tools_fixtures:lookup_customer"] == "duet.workbenches.PythonFunctionTool"
    assert providers["weather"] == "duet.workbenches.HttpServiceTool" and providers["add"] == "duet.workbenches.McpServerTool"

    server = DuetServer(["--team", str(team_file), "--model-name", "exported"], {}, tmp_path / "duet.log")
    try:
        upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("add", '{"a": 1, "b": 2}'), ScriptedCall("lookup_customer", '{"email": "x@y.z"}')]),
                        answer_from_results)
        content = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=60,
                             json={"model": "exported", "messages": QUESTION}).json()["choices"][0]["message"]["content"]
        three, customer = content.removeprefix("Results: ").split(" | ")
        assert three == "3" and json.loads(customer)["pipeline"] == "exported"
        assert server.health()["mcp_servers"]["exported"]["calc"]["status"] == "running"
        mcp_pid = int(services.pid_file.read_text())  # type: ignore[attr-defined]  # this server's own MCP process
    finally:
        server.stop()
    # The MCP server stops with the service.
    deadline = time.monotonic() + 10
    while Path(f"/proc/{mcp_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{mcp_pid}").exists() or "zombie" in Path(f"/proc/{mcp_pid}/status").read_text().lower()


def test_hidden_parts_survive_several_client_rounds(http_services: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Round 1 mixes a service call with a client call; round 2 is client-only. The second
    follow-up still shows the answer model round 1's service call and result."""
    mixed_round(upstream)
    first = http_services.post("/v1/chat/completions", json={"model": "duet-services", "messages": QUESTION, "tools": [NOTIFY]}).json()
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("notify_user", '{"message": "again"}')]))
    history = follow_up(first)
    second = http_services.post("/v1/chat/completions", json={"model": "duet-services", "messages": history, "tools": [NOTIFY]}).json()
    call = second["choices"][0]["message"]["tool_calls"][0]
    history += [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": "notified again"}]
    upstream.script(ANSWER, answer_from_results)
    third = http_services.post("/v1/chat/completions", json={"model": "duet-services", "messages": history, "tools": [NOTIFY]})
    assert third.status_code == 200
    messages = upstream.requests_for(ANSWER)[2].body["messages"]
    calls = [c["function"]["name"] for m in messages if m.get("tool_calls") for c in m["tool_calls"]]
    assert calls == ["lookup_customer", "notify_user", "notify_user"]
    assert [m["content"] for m in messages if m["role"] == "tool"][1:] == ["notified", "notified again"]
    # The reasoning follows the user's message it was about (issue 26).
    assert "Look the customer up, then notify." in next(m for m in reversed(messages) if m["role"] == "user")["content"]
