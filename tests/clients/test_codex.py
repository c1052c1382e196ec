"""Codex CLI, the real one, with Duet as its model over the Responses API: a task done with its own
shell tool, the tool's result sent back in the next request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream

CODEX = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "codex"  # installed by `make test` (scripts/ensure-codex)


def test_codex_cli_completes_a_task_with_its_shell_tool(duet: DuetServer, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    assert CODEX.exists(), f"Codex CLI is missing at {CODEX}: run scripts/ensure-codex {CODEX.parents[2]} (make test does)"
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(f"""
model = "duet"
model_provider = "duet"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.duet]
name = "Duet"
base_url = "{duet.base_url}/v1"
wire_api = "responses"
env_key = "DUET_API_KEY"
request_max_retries = 0
stream_max_retries = 0
""")
    upstream.script(REASONER, Reply(reasoning=["Write the file with the shell."]))
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("exec_command", json.dumps({"cmd": "printf hi > hello.txt"}))]),
                    Reply(content=["Created ", "hello.txt."]))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CODEX_HOME": str(home), "DUET_API_KEY": API_KEY}
    done = subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-C", str(work),
                           "Create hello.txt containing hi"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "hello.txt").read_text() == "hi"
    assert "Created hello.txt." in done.stdout
    first, follow_up = upstream.requests_for(ANSWER)[:2]
    assert "exec_command" in [tool["function"]["name"] for tool in first.body["tools"]]
    result = follow_up.body["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == follow_up.body["messages"][-2]["tool_calls"][0]["id"]
