"""The real coding agents, headless, with Duet as their model: Claude Code (``claude -p``, over
``/v1/messages``) and Codex CLI (``codex exec``, over ``/v1/responses``). ``make test`` installs both
(scripts/ensure-claude-code, scripts/ensure-codex). Each runs with a home of its own (no settings,
credentials or history of this machine's user), nothing but its model calls leaving it, and a bound on
its wall time; Duet on loopback is its only server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CLAUDE = Path(sys.prefix) / "claude-code" / "node_modules" / ".bin" / "claude"
CODEX = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "codex"


@dataclass
class Finished:
    """How a run of an agent ended: its exit status (None: stopped at the wall-time bound) and output."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


def run_bounded(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Finished:
    """Runs ``command`` to its end or stops it (by its PID) after ``timeout`` seconds."""
    started = time.monotonic()
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate(timeout=10)
            code = None
    return Finished(code, stdout, stderr, round(time.monotonic() - started, 2))


def claude_code_env(base_url: str, api_key: str, home: Path) -> dict[str, str]:
    """Claude Code's environment: Duet as its Anthropic API, no traffic but the model calls."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        # Nothing but the model calls leaves the machine: no update check, telemetry or error reports.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }


def claude_code(base_url: str, api_key: str, prompt: str, work: Path, home: Path, *args: str, timeout: float = 180) -> Finished:
    """``claude -p PROMPT`` in ``work``, with its own defaults (retries included)."""
    assert CLAUDE.exists(), "the Claude Code CLI is required: `make test` installs it (scripts/ensure-claude-code .venv/claude-code)"
    return run_bounded([str(CLAUDE), "-p", prompt, *args], work, claude_code_env(base_url, api_key, home), timeout)


def codex_env(base_url: str, api_key: str, home: Path, model: str = "duet", retries: bool = True) -> dict[str, str]:
    """Codex's environment and config: Duet as a provider over the Responses API. ``retries=False``
    turns off its own retries of a request and of a broken stream (default: its defaults)."""
    codex_home = home / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    no_retries = "request_max_retries = 0\nstream_max_retries = 0\n" if not retries else ""
    (codex_home / "config.toml").write_text(f"""
model = "{model}"
model_provider = "duet"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.duet]
name = "Duet"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "DUET_API_KEY"
{no_retries}""")
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home), "DUET_API_KEY": api_key}


def codex_exec(base_url: str, api_key: str, prompt: str, work: Path, home: Path, model: str = "duet", retries: bool = True,
               timeout: float = 120) -> Finished:
    """``codex exec PROMPT`` in ``work``, its approvals and sandbox off (the tests' shell commands are their own)."""
    assert CODEX.exists(), f"Codex CLI is missing at {CODEX}: run scripts/ensure-codex {CODEX.parents[2]} (make test does)"
    command = [str(CODEX), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-C", str(work), prompt]
    return run_bounded(command, work, codex_env(base_url, api_key, home, model, retries), timeout)
