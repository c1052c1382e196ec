"""Codex CLI, the real one, with Duet as its model over the Responses API: a task done with its own
shell tool, the tool's result sent back in the next request."""

from __future__ import annotations

import json
from pathlib import Path

from tests.coding_agents import codex_exec
from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream


def test_codex_cli_completes_a_task_with_its_shell_tool(duet: DuetServer, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    upstream.script(REASONER, Reply(reasoning=["Write the file with the shell."]))
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("exec_command", json.dumps({"cmd": "printf hi > hello.txt"}))]),
                    Reply(content=["Created ", "hello.txt."]))
    done = codex_exec(duet.base_url, API_KEY, "Create hello.txt containing hi", work, tmp_path, retries=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "hello.txt").read_text() == "hi"
    assert "Created hello.txt." in done.stdout
    first, follow_up = upstream.requests_for(ANSWER)[:2]
    assert "exec_command" in [tool["function"]["name"] for tool in first.body["tools"]]
    result = follow_up.body["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == follow_up.body["messages"][-2]["tool_calls"][0]["id"]
