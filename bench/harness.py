"""What the benchmark scripts share: free ports, figures from /proc, and the services on loopback —
the scripted upstream (``tests/scripted_upstream.py``), ``duet serve`` and, when asked, the minimal
relay (``bench/relay.py``, the floor), each its own process.

``duet serve`` gets a clean environment (no ``DUET_*`` variable of the caller's leaks in), points
both stages at the upstream, and is stopped by its PID whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Awaitable, Callable, Iterator, Sequence

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parent.parent
REASONER, ANSWER = "bench-r1", "bench-answer"
DUET = str(Path(sys.executable).parent / "duet")  # the console script the package installs beside this interpreter


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


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def client_session() -> aiohttp.ClientSession:
    """A client pool for one phase of a benchmark: a connection left idle through another phase may
    be closed by the server's keep-alive timeout just as it is reused, failing a request spuriously."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600))


def chat_body(model: str, messages: list[dict[str, Any]] | None = None, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A streamed chat completion request (the bench's short question unless ``messages``)."""
    body: dict[str, Any] = {"model": model, "stream": True, "messages": messages or [{"role": "user", "content": "Plan a picnic for four."}]}
    if tools:
        body["tools"] = tools
    return body


async def stream_once(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[float, float]:
    """Streams one chat completion; seconds to its first reasoning or content token, and to its end."""
    start = time.perf_counter()
    first = 0.0
    async with session.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if not first and (b'"reasoning_content"' in line or (b'"content":"' in line and b'"content":""' not in line)
                              or b'"tool_calls"' in line):
                first = time.perf_counter() - start
    return first, time.perf_counter() - start


async def throughput(call: Callable[[], Awaitable[object]], concurrency: int, seconds: float) -> tuple[int, float]:
    """``concurrency`` workers calling ``call`` back to back for ``seconds``: calls done, seconds taken."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call()
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, time.perf_counter() - start


def request_options(parser: Any, shapes: Sequence[str], *, tokens: int, requests: int, warmup: int, tokens_help: str) -> None:
    """The options of a measure that streams one shape of request at c=1 (``call_counts.py``, ``loop_hops.py``)."""
    parser.add_argument("--shape", choices=sorted(shapes), default="paced")
    parser.add_argument("--tokens", type=int, default=tokens, help=f"{tokens_help} (default {tokens})")
    parser.add_argument("--pace-ms", type=float, default=2.0)
    parser.add_argument("--requests", type=int, default=requests)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--label", default="")


def wait_up(url: str, timeout: float = 30, process: subprocess.Popen[bytes] | None = None) -> None:
    """Until ``url`` answers with anything but a 5xx; raises at once if ``process`` (what serves it) exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {process.returncode} before it answered")
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


def duet_command() -> list[str]:
    """``duet serve``: the installed one, or that of the checkout ``DUET_BENCH_CHECKOUT`` names (``checkout_duet.py``)."""
    checkout = os.environ.get("DUET_BENCH_CHECKOUT")
    if checkout:
        return [sys.executable, str(ROOT / "bench" / "checkout_duet.py"), checkout, "serve"]
    return [DUET, "serve"]


START_TIMEOUT = 120  # seconds duet serve may take to answer /health (a loaded machine imports slowly)
STDERR_SHOWN = 4000  # characters of Duet's stderr a failed start shows (its end)


def start_duet(port: int, env: dict[str, str], log: IO[str] | int = subprocess.DEVNULL, command: Sequence[str] = (DUET,),
               start_timeout: float = 30) -> subprocess.Popen[bytes]:
    """``duet serve`` on ``port`` with ``env`` over a copy of this environment without its ``DUET_*``
    variables. Without a ``log``, its stderr is kept in a temporary file and shown if it does not start.
    ``command``: what runs ``duet`` (another checkout's, a launcher: a before-and-after comparison)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    clean.update({"DUET_PORT": str(port), "DUET_LOG_LEVEL": "warning", **env})
    stdout = log if log is not subprocess.DEVNULL else None
    with contextlib.ExitStack() as cleanup:
        stderr = log if log is not subprocess.DEVNULL else cleanup.enter_context(tempfile.TemporaryFile())
        duet = subprocess.Popen(duet_command() if tuple(command) == (DUET,) else [*command, "serve"],
                                cwd=ROOT, env=clean, stdout=stdout, stderr=stderr)
        try:
            wait_up(f"http://127.0.0.1:{port}/health", timeout=max(start_timeout, START_TIMEOUT), process=duet)
        except BaseException as exc:
            stop(duet)
            if not isinstance(exc, Exception) or stderr is log:
                raise
            stderr.seek(0)
            shown = stderr.read().decode(errors="replace")[-STDERR_SHOWN:]
            raise RuntimeError(f"duet serve did not start (exit code {duet.returncode}); its stderr:\n{shown}") from None
    # Serving: this handle closes, the child keeps writing to its own (a file never blocks it as a full pipe would).
    return duet


def start_relay(port: int, upstream_base: str) -> subprocess.Popen[bytes]:
    """The minimal two-stage relay (``bench/relay.py``) on ``port``, both stages on ``upstream_base``."""
    relay = subprocess.Popen([sys.executable, str(ROOT / "bench" / "relay.py"), "--port", str(port), "--upstream", upstream_base,
                              "--reasoner", REASONER, "--answer", ANSWER], cwd=ROOT)
    try:
        wait_up(f"http://127.0.0.1:{port}/health")
    except BaseException:
        stop(relay)
        raise
    return relay


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
    upstream: subprocess.Popen[bytes] | None = None
    relay: subprocess.Popen[bytes] | None = None
    relay_port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def relay_url(self) -> str:
        return f"http://127.0.0.1:{self.relay_port}"


@contextlib.contextmanager
def served(upstream_args: Sequence[str] = (), env: dict[str, str] | None = None,
           log: IO[str] | int = subprocess.DEVNULL, relay: bool = False, command: Sequence[str] = (DUET,),
           start_timeout: float = 30, upstream_port: int = 0) -> Iterator[Services]:
    """The scripted upstream (``upstream_args`` for its command line; on ``upstream_port`` if given) and
    ``duet serve`` (``command``) with both stages on it and no API keys (``env`` adds or overrides
    ``DUET_*`` variables); with ``relay``, the minimal relay on the same upstream too."""
    upstream_port, port = upstream_port or free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "tests.scripted_upstream", "--port", str(upstream_port), *upstream_args],
                                cwd=ROOT, stdout=subprocess.DEVNULL)
    upstream_base = f"http://127.0.0.1:{upstream_port}/v1"
    try:
        wait_up(f"{upstream_base}/models")
        duet = start_duet(port, {"DUET_REASONER_BASE_URL": upstream_base, "DUET_REASONER_MODEL": REASONER,
                                 "DUET_ANSWER_BASE_URL": upstream_base, "DUET_ANSWER_MODEL": ANSWER, "DUET_API_KEYS": "",
                                 # Every request the same: measured as a fresh one, with its reasoner call (no reuse).
                                 "DUET_REASONING_REUSE_SECONDS": "0",
                                 **(env or {})}, log, command, start_timeout)
        try:
            if not relay:
                yield Services(duet, port, upstream_base, upstream)
                return
            relay_port = free_port()
            relay_process = start_relay(relay_port, upstream_base)
            try:
                yield Services(duet, port, upstream_base, upstream, relay_process, relay_port)
            finally:
                stop(relay_process)
        finally:
            stop(duet)
    finally:
        stop(upstream)
