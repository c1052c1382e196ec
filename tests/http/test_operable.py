"""What an operator needs of a running Duet: per-worker gauges (saturation, pending bytes, store, CPU,
memory, files) and the build in ``/metrics``; the trace and request ids in every line a request logs;
a ``DUET_*`` typo warned at startup and refused by ``duet check``; an upstream that does not answer
at startup told with what was tried and what to do."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from pathlib import Path

import httpx

from duet.agents import DEFAULT_BASE_URL
from duet.api.server._startup import Upstream, upstream_problem
from duet.api._errors import what_to_do
from tests.conftest import ANSWER, DUET, REASONER, ROOT, DuetServer, free_port
from tests.deployment import wait_until
from tests.scripted_upstream import Reply, ScriptedUpstream

WORKER_GAUGES = ("duet_saturation_ratio", "duet_pending_body_bytes", "duet_store_up", "duet_process_resident_memory_bytes",
                 "duet_process_open_fds", "duet_process_cpu_seconds_total")


def env_for(upstream: ScriptedUpstream, **more: str) -> dict[str, str]:
    return {"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER, "DUET_ANSWER_BASE_URL": upstream.base_url,
            "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": "", **more}


def samples(text: str, name: str) -> dict[str, float]:
    """``name``'s samples in a scrape: each sample's label text → its value."""
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(\{{[^}}]*\}})? (\S+)", line)
        if match:
            found[match.group(1) or ""] = float(match.group(2))
    return found


def test_each_worker_reports_its_own_gauges_and_the_build(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = DuetServer(["--workers", "2"], env_for(upstream), tmp_path / "duet.log")
    try:
        def scrape() -> str:
            return httpx.get(f"{server.base_url}/metrics", timeout=5).text

        wait_until(lambda: len(samples(scrape(), "duet_store_up")) == 2, 30, "both workers' gauges")
        text = scrape()
        workers = {re.search(r'worker="(\d+)"', labels).group(1) for labels in samples(text, "duet_store_up")}  # type: ignore[union-attr]
        assert len(workers) == 2 and str(server.process.pid) not in workers
        for name in WORKER_GAUGES:
            values = samples(text, name)
            assert {re.search(r'worker="(\d+)"', labels).group(1) for labels in values} == workers, name  # type: ignore[union-attr]
        assert set(samples(text, "duet_store_up").values()) == {1.0}
        assert all(0 <= value <= 1 for value in samples(text, "duet_saturation_ratio").values())
        assert all(value > 10 * 2**20 for value in samples(text, "duet_process_resident_memory_bytes").values())
        assert all(value > 0 for value in samples(text, "duet_process_cpu_seconds_total").values())
        [(labels, value)] = samples(text, "duet_build_info").items()
        assert value == 1 and 'autogen="0.7.5"' in labels and f'python="{platform.python_version()}"' in labels
        assert re.search(r'version="[^"]+"', labels)
    finally:
        server.stop()


def test_every_line_a_request_logs_names_its_request_and_trace(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = DuetServer([], env_for(upstream, DUET_LOG_FORMAT="json", DUET_LOG_LEVEL="debug"), tmp_path / "duet.log")
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    try:
        # A follow-up naming a tool call of Duet's that nothing stored: a warning of the pipeline's, inside the request.
        call = {"id": "call_" + "0" * 24, "type": "function", "function": {"name": "notify_user", "arguments": "{}"}}
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call["id"], "content": "done"}]
        response = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=30,
                              headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01", "X-Request-ID": "traced-1"},
                              json={"model": "duet", "messages": messages})
        assert response.status_code == 200, response.text

        def request_lines() -> list[dict[str, object]]:
            lines = [json.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")]
            return [line for line in lines if line.get("request_id") == "traced-1"]

        wait_until(lambda: any(line["logger"] == "duet.requests" for line in request_lines()), 10, "the request's line")
        lines = request_lines()
        assert any(line["logger"] == "duet.agents.pipeline._duet" and "no saved state" in str(line["message"]) for line in lines), lines
        assert all(line.get("trace_id") == trace_id for line in lines), lines
        untraced = [json.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")]
        assert all("trace_id" not in line for line in untraced if "request_id" not in line)  # startup lines belong to no trace
    finally:
        server.stop()


def run_check(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    return subprocess.run([DUET, "check"], env={**clean, "DUET_STATE_URL": f"sqlite:///{cwd / 'state.db'}", **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_a_variable_that_is_no_setting_is_a_warning_for_serve_and_an_error_for_check(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    env = env_for(upstream, DUET_API_KEY="secret")  # the clients' variable: the endpoint would be open
    server = DuetServer([], env, tmp_path / "duet.log")
    try:
        wait_until(lambda: "DUET_API_KEY is not a Duet setting" in server.log.read_text(), 10, "the warning")
        assert "WARNING duet: DUET_API_KEY is not a Duet setting and is ignored: did you mean DUET_API_KEYS?" in server.log.read_text()
    finally:
        server.stop()
    checked = run_check(env, tmp_path)
    assert checked.returncode == 1
    assert checked.stderr.strip().splitlines()[-1] == (
        "duet: check: DUET_API_KEY is not a Duet setting and is ignored: did you mean DUET_API_KEYS?")
    assert run_check(env_for(upstream, DUET_PUBLISH="0.0.0.0"), tmp_path).returncode == 0  # docker-compose's, not a mistake


def test_a_wrong_state_url_names_its_variable(tmp_path: Path) -> None:
    checked = run_check({"DUET_STATE_URL": "redis+sentinel://:hunter2@10.0.0.1/duet-state"}, tmp_path)
    assert checked.returncode == 1
    assert checked.stderr.strip() == "duet: check: DUET_STATE_URL=redis+sentinel://10.0.0.1/duet-state: a sentinel is host:port, got '10.0.0.1'"


def test_an_upstream_that_does_not_answer_at_startup_is_told_with_what_to_do(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/v1"
    server = DuetServer([], env_for(upstream, DUET_REASONER_BASE_URL=nobody, DUET_ANSWER_BASE_URL=nobody), tmp_path / "duet.log")
    try:
        wait_until(lambda: "does not answer" in server.log.read_text(), 10, "the upstream's warning")
        [line] = [line for line in server.log.read_text().splitlines() if "does not answer" in line]
        assert f"WARNING duet: the upstream {nobody} does not answer (GET {nobody}/models: ConnectError" in line
        assert line.endswith("start the server there, or set DUET_REASONER_BASE_URL / DUET_ANSWER_BASE_URL "
                             "(or the pipeline's base_url) to one that answers")
        assert httpx.get(f"{server.base_url}/health/ready", timeout=5).status_code == 200  # it serves: the warning is advice
    finally:
        server.stop()


OLLAMA_MODELS = ("deepseek-r1:7b", "qwen2.5:7b")
BOTH_URLS = ("DUET_REASONER_BASE_URL", "DUET_ANSWER_BASE_URL")


def test_the_default_ollama_is_told_to_start_and_pull() -> None:
    assert what_to_do(DEFAULT_BASE_URL, OLLAMA_MODELS, BOTH_URLS) == (
        "start Ollama (ollama serve) and pull the models (ollama pull deepseek-r1:7b && ollama pull qwen2.5:7b), "
        "or set DUET_REASONER_BASE_URL / DUET_ANSWER_BASE_URL")


def test_an_upstream_that_lacks_a_model_is_told(upstream: ScriptedUpstream) -> None:
    upstream.script("qwen2.5:7b", Reply(content=["listed"]))  # the scripted server lists the models it has scripts for
    problem = upstream_problem(Upstream(upstream.base_url, OLLAMA_MODELS, BOTH_URLS, None))
    assert problem == f"the upstream {upstream.base_url} does not list deepseek-r1:7b among its models"
    upstream.script("deepseek-r1:7b", Reply(content=["listed"]))
    assert upstream_problem(Upstream(upstream.base_url, OLLAMA_MODELS, BOTH_URLS, None)) is None
