"""Fixtures: a scripted upstream and Duet servers, all real processes and sockets on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

from tests.scripted_upstream import ScriptedUpstream

ROOT = Path(__file__).resolve().parent.parent
DUET = str(Path(sys.executable).parent / "duet")  # the console script the package installs
API_KEY = "test-key"
REASONER = "deepseek-r1"
ANSWER = "qwen-tools"
THINKING_ANSWER = "deepseek-v4-thinking"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30) -> None:
    """Until something listens on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def stop_process(process: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """Stops a process the tests started, by its PID: politely, then firmly."""
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


class DuetServer:
    """``duet serve`` in a subprocess; stopped by its PID."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT, command: str = DUET) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_file = log.open("w")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
        full_env["DUET_STATE_URL"] = f"sqlite:///{log.parent / 'state.db'}"  # never in the working tree
        # Tests script each reasoner reply: a request that repeats an earlier one must call the reasoner again,
        # unless the test is about reuse (tests/http/test_reasoning_once.py sets it).
        full_env["DUET_REASONING_REUSE_SECONDS"] = "0"
        full_env.update(env)
        if not full_env["DUET_REASONING_REUSE_SECONDS"]:  # "": each pipeline's own reasoner.reuse_seconds
            del full_env["DUET_REASONING_REUSE_SECONDS"]
        full_env["DUET_PORT"] = str(self.port)
        keys = [key.strip() for key in full_env.get("DUET_API_KEYS", "").split(",") if key.strip()]
        self.key_header = {"Authorization": f"Bearer {keys[0]}"} if keys else {}
        self.process = subprocess.Popen([command, "serve", *args], env=full_env, cwd=cwd, stdout=self._log_file, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"duet exited with {self.process.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"duet did not start:\n{self.log.read_text()}")

    def health(self) -> dict[str, Any]:
        """The readiness details (checks, in-flight requests, tasks, MCP servers): they need a key."""
        return httpx.get(f"{self.base_url}/health/ready", headers=self.key_header, timeout=5).json()

    def wait_idle(self, timeout: float = 10) -> dict[str, Any]:
        """Waits until no request is in flight; returns the last health answer."""
        deadline = time.monotonic() + timeout
        health = self.health()
        while health["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)
            health = self.health()
        return health

    def stop(self) -> None:
        stop_process(self.process)
        self._log_file.close()


@pytest.fixture(scope="session")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_upstream(upstream: ScriptedUpstream) -> None:
    upstream.reset()


def pipelines_config(upstream_url: str) -> dict[str, Any]:
    """The YAML config of the main test server: one pipeline per behaviour worth serving."""
    reasoner = {"base_url": upstream_url, "model": REASONER}
    answer = {"base_url": upstream_url, "model": ANSWER, "api_key_env": "UPSTREAM_KEY"}
    return {
        "ping_interval": 0.3,
        "model_aliases": {"claude-*": "duet"},  # Claude Code's model ids (tests/http/test_messages.py)
        "pipelines": [
            {"name": "duet", "reasoner": reasoner, "answer": answer},
            {"name": "duet-think", "reasoning_output": "think", "reasoner": reasoner, "answer": answer},
            {"name": "duet-hidden", "reasoning_output": "hidden", "reasoner": reasoner, "answer": answer},
            {"name": "answer-only", "answer": answer},
            {"name": "duet-rethink", "reasoner": {**reasoner, "reason_on_tool_results": True}, "answer": answer},
            {"name": "duet-never-rethink", "reasoner": {**reasoner, "reason_on_tool_results": False}, "answer": answer},
            # Prompt-cache hints as to OpenRouter (marks) and OpenAI (the reasoner's prompt_cache_key).
            {"name": "duet-cache-hints", "reasoner": {**reasoner, "cache_key": "on"}, "answer": {**answer, "cache_marks": "on"}},
            {"name": "duet-vision", "reasoner": reasoner, "answer": {**answer, "model": "qwen-vl", "model_info": {"vision": True}}},
            {"name": "duet-stock-client", "reasoner": {**reasoner, "client": "openai"}, "answer": {**answer, "client": "openai"}},
            {"name": "duet-impatient", "reasoner": reasoner, "answer": {**answer, "model": "qwen-slow", "read_timeout": 1.0}},
            {"name": "duet-service-rounds", "reasoner": reasoner, "answer": {**answer, "max_tool_rounds": 2}},
            {"name": "duet-functions", "reasoner": reasoner, "answer": answer,
             "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}},
            # A thinking answer model (DeepSeek's thinking mode): it wants its reasoning back on tool turns.
            {"name": "duet-thinking", "reasoner": reasoner, "answer": {**answer, "model": THINKING_ANSWER},
             "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}},
            {"name": "duet-thinking-cold", "reasoner": reasoner, "answer": {**answer, "model": THINKING_ANSWER + "-cold"}},
            {"name": "duet-thinking-off", "reasoner": reasoner, "answer": {**answer, "model": THINKING_ANSWER, "pass_reasoning_back": False},
             "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}},
        ],
    }


@pytest.fixture(scope="session")
def duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """The main server: a YAML file of pipelines, bearer keys required."""
    directory = tmp_path_factory.mktemp("duet")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump(pipelines_config(upstream.base_url)))
    server = DuetServer(
        ["--config", str(config)],
        {"DUET_API_KEYS": f"{API_KEY},second-key", "UPSTREAM_KEY": "upstream-secret"},
        directory / "duet.log",
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def env_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """A server configured only by the DUET_* environment variables, without API keys."""
    directory = tmp_path_factory.mktemp("env-duet")
    server = DuetServer(
        [],
        {
            "DUET_MODEL_NAME": "duet-env",
            "DUET_REASONER_BASE_URL": upstream.base_url,
            "DUET_REASONER_MODEL": REASONER,
            "DUET_REASONER_API_KEY": "reasoner-secret",
            "DUET_ANSWER_BASE_URL": upstream.base_url,
            "DUET_ANSWER_MODEL": ANSWER,
            "DUET_ANSWER_API_KEY": "answer-secret",
            "DUET_REASONING_OUTPUT": "think",
            "DUET_FUNCTION_TOOLS": "tests.service_tools_fixtures:lookup_customer, tests.service_tools_fixtures:slow_report",
            "DUET_API_KEYS": "",
        },
        directory / "duet.log",
    )
    yield server
    server.stop()


@pytest.fixture
def http(duet: DuetServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=duet.base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30) as client:
        yield client


def sse_events(raw: bytes) -> list[Any]:
    """Parses a response body exactly as Dify does: split on the literal blank line."""
    events: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if not block or block.startswith(":"):
            continue
        assert block.startswith("data: "), f"unexpected SSE block {block!r}"
        assert "\n" not in block, f"multi-line SSE block {block!r}"
        data = block[len("data: ") :]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def tool(name: str, description: str = "", properties: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or f"The {name} tool.",
            "parameters": {"type": "object", "properties": properties or {"query": {"type": "string"}}, "required": list(properties or {"query": 0})},
        },
    }
