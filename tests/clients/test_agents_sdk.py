"""The OpenAI Agents SDK against Duet's Responses API: an agent with a function tool, run and streamed.
The SDK runs in a process of its own (``tests/agents_sdk_client.py``): the repository's ``agents/``
folder would shadow its ``agents`` package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ANSWER, API_KEY, ROOT, DuetServer
from tests.http.test_responses import script_call
from tests.scripted_upstream import Reply, ScriptedUpstream


@pytest.mark.parametrize("mode", ["run", "streamed"])
def test_openai_agents_sdk_runs_an_agent_with_a_function_tool(duet: DuetServer, upstream: ScriptedUpstream, mode: str,
                                                              tmp_path: Path) -> None:
    script_call(upstream)
    upstream.script(ANSWER, Reply(content=["It is ", "sunny in Paris."]))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "agents_sdk_client.py"), f"{duet.base_url}/v1", API_KEY, mode],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["final"] == "It is sunny in Paris." and result["calls"] == ["Paris"]
    assert result["items"] == ["reasoning_item", "tool_call_item", "tool_call_output_item", "message_output_item"]
    assert result["streamed"] == ("It is sunny in Paris." if mode == "streamed" else "")
    follow_up = upstream.requests_for(ANSWER)[-1].body["messages"]
    assert follow_up[-1]["role"] == "tool" and follow_up[-1]["content"] == "sunny in Paris"
