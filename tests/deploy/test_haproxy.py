"""deploy/haproxy/haproxy.cfg, the load balancer in front of Duet's replicas: HAProxy itself checks it
(``haproxy -c``), and its health check and servers are the route and port ``duet serve`` has."""

from __future__ import annotations

import re
import shutil
import subprocess

from duet.api import EnvSettings
from tests.deploy._kit import DEPLOY, routes

CONFIG = DEPLOY / "haproxy" / "haproxy.cfg"


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
