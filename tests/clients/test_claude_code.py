"""Claude Code, the real CLI (``claude -p``, headless), with Duet as its model: ``ANTHROPIC_BASE_URL``
at Duet, its own default model id reaching the ``duet`` pipeline through the ``claude-*`` alias, and
a task that needs one of its own tools (Read). The scripted upstream plays the models: the answer
model calls Read on the file, then answers from what the tool returned. ``make test`` installs the
CLI (scripts/ensure-claude-code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.coding_agents import claude_code
from tests.conftest import ANSWER, API_KEY, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream, default_responder

SECRET = "duet-claude-code-7f3a"


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body.get("messages", []) if m.get("role") == "tool"]


def test_claude_code_reads_a_file_with_its_own_tool(duet: DuetServer, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    (work / "secret.txt").write_text(f"{SECRET}\n")

    def models(body: dict[str, Any]) -> Reply:
        tools = {tool["function"]["name"] for tool in body.get("tools", [])}
        if body["model"] != ANSWER:
            return default_responder(body)  # the reasoner thinks
        results = tool_results(body)
        if results:
            return Reply(content=["The file says: ", results[-1]])
        if "Read" in tools:
            return Reply(content=["Reading it."], tool_calls=[ScriptedCall("Read", json.dumps({"file_path": str(work / "secret.txt")}))])
        return Reply(content=["ok"])  # Claude Code's side requests (titles, summaries): no tools

    upstream.set_default(models)
    done = claude_code(duet.base_url, API_KEY, "What does secret.txt say?", work, tmp_path / "home", "--allowedTools", "Read")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "The file says:" in done.stdout and SECRET in done.stdout, (done.stdout, done.stderr)

    calls = upstream.requests_for(ANSWER)
    with_results = [call for call in calls if tool_results(call.body)]
    assert with_results, "the tool ran on the client and its result came back"
    assert SECRET in tool_results(with_results[-1].body)[-1]
    first = next(call.body for call in calls if "tools" in call.body)
    assert len(first["tools"]) >= 5  # its own tools, with their input schemas
    assert all(message["role"] in ("system", "user", "assistant", "tool") for message in first["messages"])


def test_claude_codes_cache_marks_reach_an_upstream_that_takes_them(duet: DuetServer, upstream: ScriptedUpstream,
                                                                     tmp_path: Path) -> None:
    """Claude Code marks its system prompt's blocks and its latest message (``cache_control``): on a
    pipeline whose answer model takes marks (as OpenRouter's does), they arrive on the parts it marked,
    at most four (Anthropic's limit)."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "secret.txt").write_text(f"{SECRET}\n")

    def models(body: dict[str, Any]) -> Reply:
        if body["model"] != ANSWER:
            return default_responder(body)
        if tool_results(body) or not body.get("tools"):
            return Reply(content=["Done: ", SECRET])
        return Reply(content=["Reading it."], tool_calls=[ScriptedCall("Read", json.dumps({"file_path": str(work / "secret.txt")}))])

    upstream.set_default(models)
    done = claude_code(duet.base_url, API_KEY, "What does secret.txt say?", work, tmp_path / "home", "--allowedTools", "Read",
                       "--model", "duet-cache-hints")
    assert done.returncode == 0, (done.stdout, done.stderr)
    main = [call.body for call in upstream.requests_for(ANSWER) if call.body.get("tools")]
    assert main, "Claude Code's main requests reached the answer model"
    for body in main:
        marked = [part for message in body["messages"] if isinstance(message["content"], list)
                  for part in message["content"] if "cache_control" in part]
        marked += [entry for entry in body["tools"] if "cache_control" in entry]
        assert 1 <= len(marked) <= 4, json.dumps(body)[:2000]
        system = body["messages"][0]
        assert system["role"] == "system" and any("cache_control" in part for part in system["content"])  # its prompt, marked
        assert all(part.get("text") for part in marked if "function" not in part)  # on text the client sent, never empty
