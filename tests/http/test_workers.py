"""``duet serve --workers N``: N processes on one port, each the whole server (edge, readiness,
drain); a tool round continues on another worker through the shared store; a worker that dies is
replaced; SIGTERM drains every worker and the parent exits 0; settings that cannot work refuse to start."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

from duet.api.server._cli import SERVE_FLAGS, build_parser, given_flags, main
from duet.api._settings import EnvSettings
from tests.conftest import ANSWER, REASONER, ROOT, DuetServer, sse_events
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.waiting import eventually, refuses_connections
from tests.http.test_service_tools import NOTIFY, QUESTION, answer_from_results, assert_whole_round_restored, follow_up, mixed_round

DRAIN = 2.5  # seconds running requests get on SIGTERM


def workers_config(upstream: ScriptedUpstream, directory: Path) -> Path:
    """A plain pipeline (for streams) and one that runs a service tool (mixed rounds leave a hidden part)."""
    reasoner = {"base_url": upstream.base_url, "model": REASONER}
    answer = {"base_url": upstream.base_url, "model": ANSWER}
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({"ping_interval": 0.2, "pipelines": [
        {"name": "duet", "reasoner": reasoner, "answer": answer},
        {"name": "duet-services", "reasoner": reasoner, "answer": answer,
         "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}},
    ]}))
    return config


def start_workers(upstream: ScriptedUpstream, directory: Path, count: str = "2") -> DuetServer:
    return DuetServer(["--config", str(workers_config(upstream, directory)), "--workers", count],
                      {"DUET_API_KEYS": "", "DUET_SHUTDOWN_TIMEOUT": str(DRAIN)}, directory / "duet.log")


@pytest.fixture(scope="module")
def two_workers(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    server = start_workers(upstream, tmp_path_factory.mktemp("workers"))
    yield server
    server.stop()


def worker_pid(client: httpx.Client) -> int:
    return int(client.get("/health/ready").json()["pid"])


def pids_seen(server: DuetServer, wanted: int, timeout: float = 30) -> set[int]:
    """The worker pids that answer ``/health/ready`` on new connections, until ``wanted`` distinct ones."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < wanted and time.monotonic() < deadline:
        try:
            seen.add(int(httpx.get(f"{server.base_url}/health/ready", timeout=2).json()["pid"]))
        except httpx.HTTPError:
            time.sleep(0.05)  # a worker starting: connections wait for it
    return seen


def pinned_clients(server: DuetServer) -> dict[int, httpx.Client]:
    """One kept-alive client per worker: a connection stays with the worker that accepted it."""
    clients: dict[int, httpx.Client] = {}
    for _ in range(100):
        client = httpx.Client(base_url=server.base_url, timeout=30)
        pid = worker_pid(client)
        if pid in clients:
            client.close()
        else:
            clients[pid] = client
        if len(clients) == 2:
            return clients
    raise AssertionError(f"only workers {list(clients)} accepted 100 connections")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_workers_serve_the_port_and_the_parent_serves_nothing(two_workers: DuetServer) -> None:
    pids = pids_seen(two_workers, 2)
    assert len(pids) == 2 and two_workers.process.pid not in pids
    assert f"serving on 127.0.0.1:{two_workers.port} with 2 workers" in two_workers.log.read_text()


def test_a_tool_round_continues_on_the_other_worker(two_workers: DuetServer, upstream: ScriptedUpstream) -> None:
    clients = pinned_clients(two_workers)
    (first_pid, first_client), (second_pid, second_client) = clients.items()
    try:
        mixed_round(upstream)
        body = {"model": "duet-services", "messages": QUESTION, "tools": [NOTIFY]}
        first = first_client.post("/v1/chat/completions", json=body).json()
        assert [c["function"]["name"] for c in first["choices"][0]["message"]["tool_calls"]] == ["notify_user"]
        assert worker_pid(second_client) == second_pid != first_pid  # the follow-up goes to the other process
        upstream.script(ANSWER, answer_from_results)
        response = second_client.post("/v1/chat/completions", json={**body, "messages": follow_up(first)})
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"].startswith("Results: ")
        assert_whole_round_restored(upstream.requests_for(ANSWER)[-1].body)  # its hidden part came from the store
    finally:
        for client in clients.values():
            client.close()


def test_a_killed_worker_is_replaced(two_workers: DuetServer) -> None:
    before = pids_seen(two_workers, 2)
    killed = min(before)
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while alive(killed) and time.monotonic() < deadline:  # the parent reaps it
        time.sleep(0.05)
    assert not alive(killed)
    deadline = time.monotonic() + 30
    after: set[int] = set()
    while len(after) < 2 and time.monotonic() < deadline:  # new connections reach the survivor, then its new sibling too
        after = pids_seen(two_workers, 2, timeout=2)
    assert len(after) == 2 and killed not in after and before - {killed} <= after
    assert f"worker {killed} ended (signal SIGKILL): starting another" in two_workers.log.read_text()
    assert two_workers.process.poll() is None


def test_sigterm_drains_every_worker_and_the_parent_exits_0(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = start_workers(upstream, tmp_path)
    clients = pinned_clients(server)
    try:
        upstream.set_default(lambda body: Reply(reasoning=[f"thinking {i} " for i in range(200)], delay_between=0.1)
                             if body["model"] == REASONER else Reply(content=["done"]))

        def long_stream(client: httpx.Client) -> tuple[list[Any], float]:
            body = {"model": "duet", "stream": True, "messages": [{"role": "user", "content": "long"}]}
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                raw = response.read()  # raises if the connection is cut before the stream's clean end
            return sse_events(raw), time.monotonic()

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            streams = [pool.submit(long_stream, client) for client in clients.values()]
            deadline = time.monotonic() + 10
            while len(upstream.requests_for(REASONER)) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            server.process.send_signal(signal.SIGTERM)  # to the parent, by its PID
            signalled = time.monotonic()
            eventually(lambda: refuses_connections(server.port), "the server stops accepting connections", 5)
            with pytest.raises(ConnectionRefusedError):  # no new connections while draining
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            for stream in streams:  # each worker ran its stream for the drain time, then ended it properly
                events, ended = stream.result(timeout=DRAIN + 10)
                errors = [event for event in events if isinstance(event, dict) and "error" in event]
                assert errors == [events[-1]] and errors[0]["error"]["code"] == "server_shutting_down"
                assert any(event["choices"][0]["delta"].get("reasoning_content") for event in events[:-1])
                assert DRAIN - 0.2 < ended - signalled < DRAIN + 3
        assert server.process.wait(timeout=DRAIN + 10) == 0
        assert not [pid for pid in clients if alive(pid)]
        log = server.log.read_text()
        assert "Traceback" not in log and log.count("shutting down: ending 1 running request(s)") == 2, log
    finally:
        for client in clients.values():
            client.close()
        server.stop()


# -- settings that cannot work stop duet serve before any worker starts ---------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.startswith("DUET_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("DUET_STATE_URL", f"sqlite:///{tmp_path / 'state.db'}")  # never in the working tree
    return monkeypatch


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``duet serve``'s one-line error, after it exits with 2."""
    with pytest.raises(SystemExit) as stopped:
        main(["serve", *argv])
    assert stopped.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("duet: cannot start: "), lines
    return lines[0]


@pytest.mark.parametrize(("flag", "variable"), [(None, "0"), (None, "abc"), ("-2", None), ("1.5", None), ("", None)])
def test_a_bad_worker_count_is_a_one_line_error(flag: str | None, variable: str | None, clean_env: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    if variable is not None:
        clean_env.setenv("DUET_WORKERS", variable)
    error = refusal(["--workers", flag] if flag is not None else [], capsys)
    where = f"--workers {flag}" if flag is not None else f"DUET_WORKERS={variable}"
    assert error.startswith(f"duet: cannot start: {where}: ") and "'auto'" in error


@pytest.mark.parametrize("where", ["variables", "yaml"])
def test_the_memory_store_with_several_workers_refuses_to_start(where: str, clean_env: pytest.MonkeyPatch, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A tool round's follow-up may reach another worker, which cannot see a memory:// store."""
    if where == "variables":
        clean_env.setenv("DUET_STATE_URL", "memory://")
        clean_env.setenv("DUET_WORKERS", "2")
        argv: list[str] = []
    else:
        clean_env.delenv("DUET_STATE_URL")
        config = tmp_path / "duet.yaml"
        config.write_text(yaml.safe_dump({"workers": 2, "state_url": "memory://", "pipelines": [{"name": "a", "answer": {"model": "m"}}]}))
        argv = ["--config", str(config)]
    with socket.create_server(("127.0.0.1", 0)) as taken:  # were the check missing, it would fail here, not serve
        error = refusal([*argv, "--port", str(taken.getsockname()[1])], capsys)
    assert "state_url" in error and "memory://" in error and "workers" in error and "DUET_WORKERS" in error


def test_one_worker_may_keep_the_memory_store(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DUET_STATE_URL", "memory://")
    clean_env.setenv("DUET_WORKERS", "2")
    assert serve_settings(["--workers", "1"]).state_url == "memory://"  # the flag wins over DUET_WORKERS


def test_a_port_in_use_fails_once_before_any_worker_starts(clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        error = refusal(["--workers", "2", "--port", str(port)], capsys)
    assert f"cannot listen on 127.0.0.1:{port}" in error


def serve_settings(argv: list[str]) -> EnvSettings:
    return EnvSettings(**given_flags(build_parser().parse_args(["serve", *argv]), *SERVE_FLAGS))


def test_workers_flag_wins_over_variable_over_yaml(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "duet.yaml"
    config.write_text(yaml.safe_dump({"workers": 3, "pipelines": [{"name": "a", "answer": {"model": "m"}}]}))
    assert serve_settings([]).workers == 1
    assert serve_settings(["--config", str(config)]).workers == 3
    clean_env.setenv("DUET_WORKERS", "4")
    assert serve_settings(["--config", str(config)]).workers == 4
    assert serve_settings(["--config", str(config), "--workers", "5"]).workers == 5


def test_auto_is_the_cores_this_process_may_use(clean_env: pytest.MonkeyPatch) -> None:
    assert serve_settings(["--workers", "auto"]).workers == len(os.sched_getaffinity(0))
    # Pinned to one core (as a container or taskset pins it), auto is 1 whatever the machine has.
    pinned = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
             "from duet.api._settings import EnvSettings; print(EnvSettings(workers='AUTO').workers)"
    done = subprocess.run([sys.executable, "-c", pinned], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("DUET_")})
    assert done.stdout.strip() == "1", done.stderr
