"""What the benchmark scripts share: free ports, figures from /proc, and the services on loopback —
the scripted upstream (``tests/scripted_upstream.py``) and ``duet serve``, each its own process.

``duet serve`` gets a clean environment (no ``DUET_*`` variable of the caller's leaks in), points
both stages at the upstream, and is stopped by its PID whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Sequence

import httpx

ROOT = Path(__file__).resolve().parent.parent
REASONER, ANSWER = "bench-r1", "bench-answer"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def memory_mb(pid: int) -> tuple[float, float]:
    """Resident set size now, and its peak, of a process (from /proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_up(url: str, timeout: float = 30) -> None:
    """Until ``url`` answers with anything but a 5xx."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def in_flight(port: int, key: str = "") -> int | None:
    """Requests Duet is serving now (the readiness details: a key, or a loopback client of an open endpoint)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return httpx.get(f"http://127.0.0.1:{port}/health/ready", headers=headers, timeout=2).json().get("in_flight")
    return None


def wait_idle(port: int, key: str = "", timeout: float = 60) -> int | None:
    """Until no request is in flight (or ``timeout``); returns the last count."""
    deadline = time.monotonic() + timeout
    count = in_flight(port, key)
    while count != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        count = in_flight(port, key)
    return count


def start_duet(port: int, env: dict[str, str], log: IO[str] | int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """``duet serve`` on ``port`` with ``env`` over a copy of this environment without its ``DUET_*`` variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    clean.update({"DUET_PORT": str(port), "DUET_LOG_LEVEL": "warning", **env})
    stdout = log if log is not subprocess.DEVNULL else None
    duet = subprocess.Popen([sys.executable, "-m", "duet.api.cli", "serve"], cwd=ROOT, env=clean, stdout=stdout, stderr=log)
    try:
        wait_up(f"http://127.0.0.1:{port}/health")
    except BaseException:
        stop(duet)
        raise
    return duet


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


@dataclass
class Services:
    duet: subprocess.Popen[bytes]
    port: int
    upstream_base: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def served(upstream_args: Sequence[str] = (), env: dict[str, str] | None = None,
           log: IO[str] | int = subprocess.DEVNULL) -> Iterator[Services]:
    """The scripted upstream (``upstream_args`` for its command line) and ``duet serve`` with both
    stages on it and no API keys (``env`` adds or overrides ``DUET_*`` variables)."""
    upstream_port, port = free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "tests.scripted_upstream", "--port", str(upstream_port), *upstream_args],
                                cwd=ROOT, stdout=subprocess.DEVNULL)
    upstream_base = f"http://127.0.0.1:{upstream_port}/v1"
    try:
        wait_up(f"{upstream_base}/models")
        duet = start_duet(port, {"DUET_REASONER_BASE_URL": upstream_base, "DUET_REASONER_MODEL": REASONER,
                                 "DUET_ANSWER_BASE_URL": upstream_base, "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": "",
                                 **(env or {})}, log)
        try:
            yield Services(duet, port, upstream_base)
        finally:
            stop(duet)
    finally:
        stop(upstream)
