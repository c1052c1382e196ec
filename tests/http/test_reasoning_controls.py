"""The client's reasoning controls drive the reasoner (issue 26), over real HTTP, on all three protocols.

``reasoning_effort`` (Chat Completions), ``reasoning.effort`` (Responses), ``thinking`` (Messages):
none / minimal / disabled → the answer model alone, no reasoner call; an effort → the reasoner's own
effort parameter where its upstream has one, else a bound on its reasoning; a budget → a bound (4
characters a token). A pipeline may ignore the client. Bad values are refused before any model call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

from tests.conftest import DuetServer
from tests.scripted_upstream import Reply, ScriptedUpstream

REASONER, ANSWER = "ctl-r1", "ctl-answer"
KEY = "ctl-key-0001"
MAX_CHARS = 400
LONG = Reply(reasoning=[f"step {i:03d} " for i in range(100)])  # 900 characters


@pytest.fixture(scope="module")
def server(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory: Path = tmp_path_factory.mktemp("controls")
    reasoner = {"base_url": upstream.base_url, "model": REASONER, "max_reasoning_chars": MAX_CHARS}
    answer = {"base_url": upstream.base_url, "model": ANSWER}
    path = directory / "duet.yaml"
    path.write_text(yaml.safe_dump({"pipelines": [
        {"name": "ctl", "reasoner": reasoner, "answer": answer},
        {"name": "ctl-param", "reasoner": {**reasoner, "effort_parameter": "reasoning_effort"}, "answer": answer},
        {"name": "ctl-ignore", "reasoner": {**reasoner, "client_controls": "ignore"}, "answer": answer},
        {"name": "ctl-default-off", "reasoner": {**reasoner, "default_effort": "none"}, "answer": answer},
    ]}))
    duet = DuetServer(["--config", str(path)], {"DUET_API_KEYS": KEY}, directory / "duet.log")
    yield duet
    duet.stop()


def post(server: DuetServer, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}", "x-api-key": KEY, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=30)


def chat(server: DuetServer, model: str = "ctl", **extra: Any) -> httpx.Response:
    return post(server, "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Think?"}], **extra})


@pytest.mark.parametrize("effort", ["none", "minimal"])
def test_no_effort_means_no_reasoner_call(server: DuetServer, upstream: ScriptedUpstream, effort: str) -> None:
    reply = chat(server, reasoning_effort=effort)
    assert reply.status_code == 200, reply.text
    assert upstream.requests_for(REASONER) == [] and len(upstream.requests_for(ANSWER)) == 1
    assert "reasoning_content" not in reply.json()["choices"][0]["message"]


def test_an_effort_bounds_the_reasoning_where_the_upstream_has_no_parameter(server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, LONG)
    reasoning = chat(server, reasoning_effort="low").json()["choices"][0]["message"]["reasoning_content"]
    assert reasoning.startswith("step 000") and f"cut off at {MAX_CHARS // 4} characters" in reasoning
    assert "reasoning_effort" not in upstream.requests_for(REASONER)[0].body


def test_an_effort_goes_to_the_reasoners_own_parameter(server: DuetServer, upstream: ScriptedUpstream) -> None:
    assert chat(server, "ctl-param", reasoning_effort="high").status_code == 200
    [call] = upstream.requests_for(REASONER)
    assert call.body["reasoning_effort"] == "high"
    assert "reasoning_effort" not in upstream.requests_for(ANSWER)[0].body  # the answer model is not the one thinking


def test_a_pipeline_may_ignore_the_client_and_set_its_own_default(server: DuetServer, upstream: ScriptedUpstream) -> None:
    assert chat(server, "ctl-ignore", reasoning_effort="none").status_code == 200
    assert len(upstream.requests_for(REASONER)) == 1
    assert chat(server, "ctl-default-off").status_code == 200  # default_effort: none
    assert len(upstream.requests_for(REASONER)) == 1
    assert chat(server, "ctl-default-off", reasoning_effort="medium").status_code == 200  # the client asks for some
    assert len(upstream.requests_for(REASONER)) == 2


def test_a_bad_effort_is_refused_before_any_model_call(server: DuetServer, upstream: ScriptedUpstream) -> None:
    reply = chat(server, reasoning_effort="extreme")
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "reasoning_effort"
    responses = post(server, "/v1/responses", {"model": "ctl", "input": "Think?", "reasoning": {"effort": "extreme"}})
    assert responses.status_code == 400 and responses.json()["error"]["param"] == "reasoning.effort"
    assert upstream.requests == []


def test_responses_reasoning_effort(server: DuetServer, upstream: ScriptedUpstream) -> None:
    reply = post(server, "/v1/responses", {"model": "ctl", "input": "Think?", "reasoning": {"effort": "minimal"}})
    assert reply.status_code == 200, reply.text
    assert upstream.requests_for(REASONER) == []


def test_messages_thinking_disabled_and_budget(server: DuetServer, upstream: ScriptedUpstream) -> None:
    base = {"model": "ctl", "max_tokens": 100, "messages": [{"role": "user", "content": "Think?"}]}
    disabled = post(server, "/v1/messages", {**base, "thinking": {"type": "disabled"}})
    assert disabled.status_code == 200, disabled.text
    assert upstream.requests_for(REASONER) == []
    upstream.script(REASONER, LONG)
    budgeted = post(server, "/v1/messages", {**base, "thinking": {"type": "enabled", "budget_tokens": 10}})
    assert budgeted.status_code == 200, budgeted.text
    [thinking] = [block["thinking"] for block in budgeted.json()["content"] if block["type"] == "thinking"]
    assert "cut off at 40 characters" in thinking  # 10 tokens, 4 characters each
