"""Two Duet replicas (``duet serve`` processes) sharing a real Redis behind a real HAProxy on
loopback: round-robin traffic, mixed tool rounds whose follow-up lands on the other replica, and
one replica killed mid-run, which the balancer's health check (``/health/ready``) takes out while
the rest of the traffic succeeds and follow-ups still find their state in Redis.

Every process is started and stopped here by its PID; every request and wait has a bound."""

from __future__ import annotations

import csv
import io
import shutil
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

from tests.conftest import ANSWER, REASONER, DuetServer, free_port, sse_events, stop_process, tool, wait_for_port
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

PIPELINE = "duet-replicas"
QUESTION = [{"role": "user", "content": "Who is a@b.c?"}]
NOTIFY = tool("notify_user", "Shows a notification in the client app.", {"message": {"type": "string"}})
CHECK_INTERVAL_MS = 200  # HAProxy's health check of each replica; two failures take one out
# A check may take up to 2 s ("timeout check"; without it the interval is the timeout, and a replica
# slow to answer on a loaded machine was taken out with the killed one: 502/503 for everything).
# A killed replica refuses the connection at once, so it is still taken out within two intervals.
REQUEST_TIMEOUT = 30.0


def mixed_rounds(body: dict[str, Any]) -> Reply:
    """The upstream of every conversation: the answer model calls a service tool (lookup_customer)
    and a client tool (notify_user); given the results, it answers with all of them. A follow-up
    whose replica could not restore the hidden part (the service call and its result) shows only
    the client's result."""
    if body["model"] == REASONER:
        return Reply(reasoning=["Look the customer up, then notify."])
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if results:
        return Reply(content=["Results: ", " | ".join(results)])
    return Reply(content=["Working."], delay=0.05, tool_calls=[
        ScriptedCall("lookup_customer", '{"email": "a@b.c"}'), ScriptedCall("notify_user", '{"message": "found"}')])


@dataclass
class Balancer:
    """HAProxy in front of the replicas: round robin, ``/health/ready`` checked every
    :data:`CHECK_INTERVAL_MS`, a connection refused retried on the other replica, and the server
    that answered named in ``X-Served-By``."""

    process: subprocess.Popen  # type: ignore[type-arg]
    base_url: str
    stats_socket: Path

    def server_states(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it (``UP``, ``DOWN``, ...), from its stats socket."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.stats_socket))
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
        return {row["svname"]: row["status"] for row in rows if row["svname"].startswith("replica-")}


def start_balancer(ports: list[int], directory: Path) -> Balancer:
    binary = shutil.which("haproxy")
    assert binary, "haproxy is required (the README's test command installs it)"
    port, stats = free_port(), directory / "haproxy.sock"
    servers = "\n".join(f"    server replica-{i} 127.0.0.1:{p}" for i, p in enumerate(ports))
    config = directory / "haproxy.cfg"
    config.write_text(f"""global
    maxconn 512
    stats socket {stats} mode 600 level user

defaults
    mode http
    timeout connect 2s
    timeout check 2s
    timeout client {int(REQUEST_TIMEOUT)}s
    timeout server {int(REQUEST_TIMEOUT)}s
    retries 2
    option redispatch 1

frontend duet
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /health/ready
    http-check expect status 200
    default-server check inter {CHECK_INTERVAL_MS} fall 2 rise 2
    http-response set-header X-Served-By %[srv_name]
{servers}
""")
    process = subprocess.Popen([binary, "-f", str(config), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, timeout=10)
    except RuntimeError:
        stop_process(process)
        raise RuntimeError(f"haproxy did not start: {process.stderr.read().decode() if process.stderr else ''}") from None
    return Balancer(process, f"http://127.0.0.1:{port}", stats)


def wait_for_states(balancer: Balancer, expected: dict[str, str], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    states = balancer.server_states()
    while {name: state.split()[0] for name, state in states.items()} != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        states = balancer.server_states()
    assert {name: state.split()[0] for name, state in states.items()} == expected, states


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required (the README's test command installs it)"
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    wait_for_port(port)
    yield f"redis://127.0.0.1:{port}/0"
    stop_process(process)


@pytest.fixture
def deployment(upstream: ScriptedUpstream, redis_url: str, tmp_path: Path) -> Iterator[tuple[list[DuetServer], Balancer]]:
    """Two replicas of one configuration, sharing Redis, behind HAProxy."""
    upstream.set_default(mixed_rounds)
    config = tmp_path / "duet.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{
        "name": PIPELINE, "reasoner": {"base_url": upstream.base_url, "model": REASONER},
        "answer": {"base_url": upstream.base_url, "model": ANSWER},
        "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}}]}))
    replicas: list[DuetServer] = []
    balancer = None
    try:
        with ThreadPoolExecutor(2) as pool:  # each start imports the whole service: start both at once
            starts = [pool.submit(DuetServer, ["--config", str(config)], {"DUET_STATE_URL": redis_url}, tmp_path / f"replica-{i}.log")
                      for i in range(2)]
            replicas = [start.result() for start in starts]
        balancer = start_balancer([replica.port for replica in replicas], tmp_path)
        wait_for_states(balancer, {"replica-0": "UP", "replica-1": "UP"})
        yield replicas, balancer
    finally:
        if balancer is not None:
            stop_process(balancer.process)
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()


@dataclass
class Conversation:
    """A mixed tool round and its follow-up, each sent through the balancer; who served which."""

    first_by: str = ""
    follow_up_by: str = ""
    answer: str = ""
    error: str = ""


def first_round(client: httpx.Client) -> tuple[dict[str, Any], str]:
    response = client.post("/v1/chat/completions", json={"model": PIPELINE, "messages": QUESTION, "tools": [NOTIFY]})
    assert response.status_code == 200, response.text
    return response.json(), response.headers["x-served-by"]


def follow_up(client: httpx.Client, first: dict[str, Any], stream: bool) -> tuple[str, str]:
    """Sends the client's tool result; returns the answer's text and the replica that wrote it."""
    message = first["choices"][0]["message"]
    [notify] = message["tool_calls"]  # the service call stays hidden: the client sees only its own
    messages = [*QUESTION, {"role": "assistant", "content": message["content"], "tool_calls": [notify]},
                {"role": "tool", "tool_call_id": notify["id"], "content": "notified"}]
    response = client.post("/v1/chat/completions", json={"model": PIPELINE, "stream": stream, "messages": messages, "tools": [NOTIFY]})
    assert response.status_code == 200, response.text
    if stream:
        events = sse_events(response.content)
        assert events[-1] == "[DONE]"
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    else:
        text = response.json()["choices"][0]["message"]["content"]
    return text, response.headers["x-served-by"]


def converse(base_url: str, stream: bool) -> Conversation:
    conversation = Conversation()
    try:
        with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT) as client:
            first, conversation.first_by = first_round(client)
            conversation.answer, conversation.follow_up_by = follow_up(client, first, stream)
    except (AssertionError, httpx.HTTPError, KeyError) as exc:
        conversation.error = f"{type(exc).__name__}: {exc}"
    return conversation


def restored(answer: str) -> bool:
    """The follow-up's answer model saw the service call's result (Ada's record) beside the client's."""
    return answer.startswith("Results: ") and '"name": "Ada"' in answer and answer.endswith(" | notified")


def test_replicas_behind_a_balancer_share_rounds_and_survive_a_killed_replica(
    deployment: tuple[list[DuetServer], Balancer], upstream: ScriptedUpstream, request: pytest.FixtureRequest
) -> None:
    replicas, balancer = deployment

    # Round robin, one request at a time: each first round and its follow-up land on different replicas.
    sequential = [converse(balancer.base_url, stream=i % 2 == 1) for i in range(6)]
    assert [c.error for c in sequential] == [""] * 6
    served = [name for c in sequential for name in (c.first_by, c.follow_up_by)]
    assert served == ["replica-0", "replica-1"] * 6
    assert all(restored(c.answer) for c in sequential), [c.answer for c in sequential]

    # First rounds that replica 0 serves, whose follow-ups come after it is gone.
    held_client = httpx.Client(base_url=balancer.base_url, timeout=REQUEST_TIMEOUT)
    request.addfinalizer(held_client.close)
    held = [first_round(held_client) for _ in range(4)]
    assert [served_by for _, served_by in held] == ["replica-0", "replica-1"] * 2

    # Concurrent traffic; replica 0 is killed (SIGKILL, by its PID) while it runs.
    killed = replicas[0]
    total, kill_after = 60, 20
    started = threading.Semaphore(0)

    def one(index: int) -> Conversation:
        started.release()
        return converse(balancer.base_url, stream=index % 2 == 0)

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, i) for i in range(total)]
        for _ in range(kill_after):
            assert started.acquire(timeout=60)
        killed.process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        killed.process.wait(10)
        # Two failed checks take it out: about 2 x CHECK_INTERVAL_MS, while the traffic goes on.
        wait_for_states(balancer, {"replica-0": "DOWN", "replica-1": "UP"}, timeout=10)
        taken_out_after = time.monotonic() - killed_at
        conversations = [future.result(timeout=120) for future in futures]
    assert taken_out_after < 5

    failed = [c for c in conversations if c.error]
    # Only a request that replica 0 had already begun can be lost with it (HAProxy retries a refused
    # connection on the other replica): at most one per client thread.
    assert len(failed) <= 6, [c.error for c in failed]
    succeeded = [c for c in conversations if not c.error]
    assert len(succeeded) >= total - 6
    assert all(restored(c.answer) for c in succeeded), [c.answer for c in succeeded if not restored(c.answer)]

    # The rounds replica 0 began before it died are finished by replica 1: their state was in Redis.
    for (first, _), stream in zip(held, (False, True, False, True), strict=True):
        answer, served_by = follow_up(held_client, first, stream)
        assert served_by == "replica-1" and restored(answer), answer

    # With replica 0 out, everything goes to replica 1, and still finds its state.
    after = [converse(balancer.base_url, stream=i % 2 == 0) for i in range(4)]
    assert [c.error for c in after] == [""] * 4
    assert {c.first_by for c in after} | {c.follow_up_by for c in after} == {"replica-1"}
    assert all(restored(c.answer) for c in after)
