"""Real deployments on loopback, for the tests and the benchmarks: Redis (``redis-server``), Redis
Sentinel (``redis-server --sentinel``), HAProxy serving ``deploy/haproxy/haproxy.cfg`` as shipped (its
addresses changed; a stats socket and an ``X-Served-By`` header added to watch it), and the mixed tool
rounds their clients send.

Every process is started here and stopped by its PID; every wait has a bound."""

from __future__ import annotations

import contextlib
import csv
import io
import re
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import yaml

from tests.conftest import ANSWER, REASONER, ROOT, DuetServer, free_port, sse_events, stop_process, tool, wait_for_port
from tests.scripted_upstream import Reply, ScriptedCall

SHIPPED_HAPROXY = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
QUESTION = [{"role": "user", "content": "Who is a@b.c?"}]
NOTIFY = tool("notify_user", "Shows a notification in the client app.", {"message": {"type": "string"}})
LOOKUP = "tests.service_tools_fixtures:lookup_customer"
REQUEST_TIMEOUT = 30.0


# -- the conversations -----------------------------------------------------------------------------


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
    return Reply(content=["Working."], delay=0.02, tool_calls=[
        ScriptedCall("lookup_customer", '{"email": "a@b.c"}'), ScriptedCall("notify_user", '{"message": "found"}')])


def restored(answer: str) -> bool:
    """The follow-up's answer model saw the service call's result (Ada's record) beside the client's."""
    return answer.startswith("Results: ") and '"name": "Ada"' in answer and answer.endswith(" | notified")


def degraded(answer: str) -> bool:
    """The follow-up went on without its hidden part: the answer model saw only the client's result."""
    return answer == "Results: notified"


@dataclass
class Conversation:
    """A mixed tool round and its follow-up; who served which, what the follow-up answered, and
    what was not kept (the ``duet-unsaved`` header of the first round)."""

    first_by: str = ""
    follow_up_by: str = ""
    answer: str = ""
    unsaved: str = ""
    error: str = ""


def first_round(client: httpx.Client, model: str) -> tuple[dict[str, Any], httpx.Response]:
    response = client.post("/v1/chat/completions", json={"model": model, "messages": QUESTION, "tools": [NOTIFY]})
    assert response.status_code == 200, response.text
    return response.json(), response


def follow_up(client: httpx.Client, model: str, first: dict[str, Any], stream: bool) -> tuple[str, httpx.Response]:
    """Sends the client's tool result; returns the answer's text and the response."""
    message = first["choices"][0]["message"]
    [notify] = message["tool_calls"]  # the service call stays hidden: the client sees only its own
    messages = [*QUESTION, {"role": "assistant", "content": message["content"], "tool_calls": [notify]},
                {"role": "tool", "tool_call_id": notify["id"], "content": "notified"}]
    response = client.post("/v1/chat/completions", json={"model": model, "stream": stream, "messages": messages, "tools": [NOTIFY]})
    assert response.status_code == 200, response.text
    if stream:
        events = sse_events(response.content)
        assert events[-1] == "[DONE]", events[-3:]
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e.get("choices"))
    else:
        text = response.json()["choices"][0]["message"]["content"]
    return text, response


def converse(base_url: str, model: str, stream: bool, headers: dict[str, str] | None = None) -> Conversation:
    """One conversation (first round, then follow-up), each request on its own connection's turn."""
    conversation = Conversation()
    try:
        with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT, headers=headers) as client:
            first, response = first_round(client, model)
            conversation.first_by = response.headers.get("x-served-by", "")
            conversation.unsaved = response.headers.get("duet-unsaved", "")
            conversation.answer, response = follow_up(client, model, first, stream)
            conversation.follow_up_by = response.headers.get("x-served-by", "")
    except (AssertionError, httpx.HTTPError, KeyError, ValueError) as exc:
        conversation.error = f"{type(exc).__name__}: {exc}"
    return conversation


# -- Redis -----------------------------------------------------------------------------------------


class RedisServer:
    """``redis-server`` on a loopback port (``port``: a fixed one, to restart it where it was)."""

    def __init__(self, directory: Path, port: int | None = None, *, replica_of: int | None = None, persist: bool = False) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is required (make .venv/.test-ready installs it)"
        self.port = port or free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory), "--save", "",
                "--appendonly", "yes" if persist else "no", "--logfile", str(directory / "redis.log")]
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, timeout=10)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self, *args: str, timeout: float = 5) -> str:
        """One command through ``redis-cli``; its output."""
        binary = shutil.which("redis-cli")
        assert binary, "redis-cli is required (Debian's redis-tools, beside redis-server)"
        result = subprocess.run([binary, "-p", str(self.port), *args], capture_output=True, text=True, timeout=timeout)
        return result.stdout.strip()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            stop_process(self.process)


class Sentinels:
    """``count`` Redis Sentinels watching the primary ``service`` at 127.0.0.1:``primary_port``; a
    primary unreachable for ``down_after_ms`` is failed over once ``quorum`` of them agree."""

    def __init__(self, directory: Path, service: str, primary_port: int, count: int = 3, quorum: int = 2,
                 down_after_ms: int = 1000) -> None:
        binary = shutil.which("redis-sentinel") or shutil.which("redis-server")
        assert binary, "redis-server is required (make .venv/.test-ready installs it)"
        self.service = service
        self.ports = [free_port() for _ in range(count)]
        self.processes: list[subprocess.Popen[bytes]] = []
        for index, port in enumerate(self.ports):
            config = directory / f"sentinel-{index}.conf"  # a sentinel rewrites its file: one each
            config.write_text(f"port {port}\nbind 127.0.0.1\ndir {directory}\nlogfile {directory / f'sentinel-{index}.log'}\n"
                              f"sentinel monitor {service} 127.0.0.1 {primary_port} {quorum}\n"
                              f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                              f"sentinel failover-timeout {service} 10000\n"
                              f"sentinel parallel-syncs {service} 1\n")
            args = [binary, str(config)] if binary.endswith("sentinel") else [binary, str(config), "--sentinel"]
            self.processes.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            wait_for_port(port, timeout=10)

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"redis+sentinel://{hosts}/{self.service}/{db}"

    def command(self, *args: str, timeout: float = 5) -> str:
        """One command to the first sentinel, through ``redis-cli``; its output."""
        binary = shutil.which("redis-cli")
        assert binary, "redis-cli is required (Debian's redis-tools, beside redis-server)"
        return subprocess.run([binary, "-p", str(self.ports[0]), *args], capture_output=True, text=True, timeout=timeout).stdout.strip()

    def primary_port(self) -> int | None:
        """The primary's port as the first sentinel that answers names it."""
        binary = shutil.which("redis-cli")
        assert binary
        for port in self.ports:
            result = subprocess.run([binary, "-p", str(port), "sentinel", "get-master-addr-by-name", self.service],
                                    capture_output=True, text=True, timeout=5)
            lines = result.stdout.split()
            if len(lines) == 2:
                return int(lines[1])
        return None

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                stop_process(process)


# -- HAProxy ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BalancerOptions:
    """What a test changes of the shipped configuration (``None``: as shipped)."""

    balance: str | None = None
    """The algorithm (``roundrobin`` to see requests alternate); shipped: ``leastconn``."""
    check_interval: str | None = None
    """How often each replica's ``/health/ready`` is checked (``200ms`` to take a killed one out fast); shipped: ``2s``."""
    check_timeout: str | None = None
    """How long a check may take (``timeout check``); shipped: none, so the interval bounds it."""
    slowstart: bool = True
    """False: a replica that comes up gets its full share at once (``slowstart`` off)."""


def _changed(text: str, pattern: str, replacement: str) -> str:
    text, count = re.subn(pattern, replacement, text)
    assert count == 1, f"deploy/haproxy/haproxy.cfg changed shape ({pattern!r}): update this helper"
    return text


def _with_options(text: str, options: BalancerOptions) -> str:
    if options.balance is not None:
        text = _changed(text, r"(?m)^(\s*balance )\S+", rf"\g<1>{options.balance}")
    if options.check_interval is not None:
        text = _changed(text, r"(?m)^(\s*default-server .*\binter )\S+", rf"\g<1>{options.check_interval}")
    if options.check_timeout is not None:
        text = _changed(text, r"(?m)^defaults\n", f"defaults\n    timeout check {options.check_timeout}\n")
    if not options.slowstart:
        text = _changed(text, r"(?m)^(\s*default-server .*?) slowstart \S+", r"\g<1>")
    return text


def shipped_haproxy_config(port: int, servers: list[int], stats_socket: Path, options: BalancerOptions = BalancerOptions()) -> str:
    """``deploy/haproxy/haproxy.cfg`` as shipped, its addresses changed (and ``options``), with what the
    tests watch it by: a stats socket (each server's state) and ``X-Served-By`` (the server that answered)."""
    text = _with_options(SHIPPED_HAPROXY.read_text(), options)
    text, binds = re.subn(r"(?m)^(\s*bind )\S+", rf"\g<1>127.0.0.1:{port}", text)
    text, globals_ = re.subn(r"(?m)^global\n", f"global\n    stats socket {stats_socket} mode 600 level user\n", text)
    text, shipped_servers = re.subn(r"(?m)^\s*server duet-\d+ \S+.*\n?", "", text)
    assert (binds, globals_) == (1, 1) and shipped_servers >= 1, "deploy/haproxy/haproxy.cfg changed shape: update this helper"
    lines = ["    http-response set-header X-Served-By %[srv_name]"]
    lines += [f"    server duet-{index + 1} 127.0.0.1:{server_port}" for index, server_port in enumerate(servers)]
    return text.rstrip("\n") + "\n" + "\n".join(lines) + "\n"


@dataclass
class Balancer:
    """HAProxy serving the shipped configuration; the replica that answered is in ``X-Served-By``."""

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
        return {row["svname"]: row["status"].split()[0] for row in rows if row["svname"].startswith("duet-")}

    def stop(self) -> None:
        stop_process(self.process)


def start_balancer(servers: list[int], directory: Path, options: BalancerOptions = BalancerOptions()) -> Balancer:
    """HAProxy serving the shipped configuration (changed by ``options``) in front of ``servers``
    (``duet-1``, ``duet-2``, ... in that order)."""
    binary = shutil.which("haproxy")
    assert binary, "haproxy is required (make .venv/.test-ready installs it)"
    port, stats = free_port(), directory / "haproxy.sock"
    config = directory / "haproxy.cfg"
    config.write_text(shipped_haproxy_config(port, servers, stats, options))
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
    while states != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        states = balancer.server_states()
    assert states == expected, states


def wait_until(condition: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    """Until ``condition()`` is true; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(interval)


BOTH_UP = {"duet-1": "UP", "duet-2": "UP"}
"""The balancer's view of two healthy replicas (:func:`replicas_behind_balancer`)."""


@contextlib.contextmanager
def replicas_behind_balancer(upstream_url: str, directory: Path, pipeline: str, env: dict[str, str] | None = None,
                             options: BalancerOptions = BalancerOptions()) -> Iterator[tuple[list[DuetServer], Balancer, RedisServer]]:
    """Two ``duet serve`` of one configuration (``pipeline`` on the upstream at ``upstream_url``, with the
    service tool ``LOOKUP``) sharing a real Redis, behind HAProxy running the shipped configuration; all
    stopped by their PIDs on the way out."""
    redis = RedisServer(directory / "redis")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{
        "name": pipeline, "reasoner": {"base_url": upstream_url, "model": REASONER},
        "answer": {"base_url": upstream_url, "model": ANSWER}, "tools": {"functions": [LOOKUP]}}]}))
    replicas: list[DuetServer] = []
    balancer = None
    try:
        with ThreadPoolExecutor(2) as pool:  # each start imports the whole service: start both at once
            environment = {"DUET_STATE_URL": redis.url, **(env or {})}
            starts = [pool.submit(DuetServer, ["--config", str(config)], environment, directory / f"replica-{i}.log") for i in range(2)]
            replicas = [start.result() for start in starts]
        balancer = start_balancer([replica.port for replica in replicas], directory, options)
        wait_for_states(balancer, BOTH_UP)
        yield replicas, balancer, redis
    finally:
        if balancer is not None:
            balancer.stop()
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()
        redis.stop()
