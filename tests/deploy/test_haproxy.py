"""deploy/haproxy/haproxy.cfg, the load balancer in front of Duet's replicas: HAProxy itself checks it
(``haproxy -c``), its health check and servers are the route and port ``duet serve`` has, and run
as shipped (only its addresses made loopback ones) in front of two ``duet serve`` it serves through one
of them stopping."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from duet.api import EnvSettings
from tests.conftest import ANSWER, REASONER, DuetServer, free_port, stop_process, wait_for_port
from tests.deploy._kit import DEPLOY, routes
from tests.scripted_upstream import ScriptedUpstream

CONFIG = DEPLOY / "haproxy" / "haproxy.cfg"
KEY = "client-key"


def test_haproxy_accepts_the_configuration() -> None:
    binary = shutil.which("haproxy")
    assert binary, "haproxy is required (`make .venv/.test-ready` installs Debian's package)"
    checked = subprocess.run([binary, "-c", "-f", str(CONFIG)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "Configuration file is valid" in checked.stdout + checked.stderr, checked.stderr


def test_haproxy_checks_readiness_and_sends_to_duets_port() -> None:
    text = CONFIG.read_text()
    check = re.search(r"^\s*option httpchk GET (\S+)$", text, re.MULTILINE)
    assert check and check.group(1) == "/health/ready" and check.group(1) in routes()
    assert re.search(r"^\s*http-check expect status 200$", text, re.MULTILINE)
    assert re.search(r"^\s*option redispatch", text, re.MULTILINE)
    ports = {int(port) for port in re.findall(r"^\s*server \S+ \S+:(\d+)$", text, re.MULTILINE)}
    assert ports == {EnvSettings.model_fields["port"].default}
    # A non-streamed answer is silent until it is whole (reasoning and answer): minutes, not seconds.
    timeouts = dict(re.findall(r"^\s*timeout (client|server) (\d+)s", text, re.MULTILINE))
    assert int(timeouts["client"]) >= 300 and int(timeouts["server"]) >= 300


@pytest.fixture
def replicas(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[list[DuetServer]]:
    servers: list[DuetServer] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(DuetServer([], {"DUET_API_KEYS": KEY, "DUET_REASONER_BASE_URL": upstream.base_url,
                                           "DUET_REASONER_MODEL": REASONER, "DUET_ANSWER_BASE_URL": upstream.base_url,
                                           "DUET_ANSWER_MODEL": ANSWER}, tmp_path / name / "duet.log"))
        yield servers
    finally:
        for server in servers:
            if server.process.poll() is None:
                server.stop()


def running_config(replicas: list[DuetServer], port: int) -> str:
    """The shipped file with this machine's addresses: the listening port and the replicas on loopback."""
    text = re.sub(r"^(\s*)bind :\d+$", rf"\1bind 127.0.0.1:{port}", CONFIG.read_text(), flags=re.MULTILINE)
    text = re.sub(r"^\s*server .*\n", "", text, flags=re.MULTILINE)
    return text + "".join(f"    server duet-{i} 127.0.0.1:{replica.port}\n" for i, replica in enumerate(replicas))


def test_haproxy_with_the_shipped_configuration_serves_through_a_replica_stopping(
        replicas: list[DuetServer], tmp_path: Path) -> None:
    binary = shutil.which("haproxy")
    assert binary, "haproxy is required (`make .venv/.test-ready` installs Debian's package)"
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(running_config(replicas, port))
    process = subprocess.Popen([binary, "-f", str(config), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    body = {"model": "duet", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"Authorization": f"Bearer {KEY}"}

    def ask(**extra: str) -> httpx.Response:
        return httpx.post(url, json=body, headers={**headers, **extra}, timeout=30)

    try:
        wait_for_port(port, timeout=10)
        deadline = time.monotonic() + 30  # until the health checks have let a replica in (rise 2, every 2 s)
        while (status := _status(ask)) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status == 200
        # Each request gets an id from HAProxy, unless the client sent its own.
        ids = {ask().headers["x-request-id"] for _ in range(4)}
        assert len(ids) == 4 and all(ids)
        assert ask(**{"X-Request-ID": "client-chosen-1"}).headers["x-request-id"] == "client-chosen-1"
        # A replica stops (SIGTERM: it drains, then refuses connections): no request fails meanwhile.
        replicas[0].stop()
        assert [ask().status_code for _ in range(10)] == [200] * 10
    finally:
        stop_process(process)


def _status(ask: Any) -> int:
    try:
        return ask().status_code  # type: ignore[no-any-return]
    except httpx.HTTPError:
        return 0
