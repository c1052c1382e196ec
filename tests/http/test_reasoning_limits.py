"""Bounded reasoning: at ``max_reasoning_chars`` or ``max_reasoning_seconds`` the reasoner's call is
closed, the client sees a short note in the reasoning, and the answer model goes on with the
reasoning so far."""

from __future__ import annotations

import time
from typing import Any, Iterator

import httpx
import pytest
import yaml

from duet.agents import ReasoningAgent
from duet.agents.upstream._client import OpenAICompatibleClient
from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, sse_events
from tests.hang_ups import alarming_lines
from tests.scripted_upstream import Reply, ScriptedUpstream

MAX_CHARS = 50
MAX_SECONDS = 0.6
STEPS = Reply(reasoning=[f"step {i:03d} " for i in range(200)], delay_between=0.05)  # 9 chars a step, 10 s in all
# Bounds on a whole request are far from both the limit and what the reasoner would take without it,
# so that a loaded machine neither fails them nor lets a missing limit pass.
WELL_UNDER_THE_REASONERS_TIME = 5.0


@pytest.fixture(scope="module")
def bounded_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory = tmp_path_factory.mktemp("reasoning-limits")
    reasoner = {"base_url": upstream.base_url, "model": REASONER}
    answer = {"base_url": upstream.base_url, "model": ANSWER}
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({
        "ping_interval": 0.3,
        "pipelines": [
            {"name": "duet-short", "reasoner": {**reasoner, "max_reasoning_chars": MAX_CHARS}, "answer": answer},
            {"name": "duet-quick", "reasoner": {**reasoner, "max_reasoning_seconds": MAX_SECONDS}, "answer": answer},
            {"name": "duet-quick-stock", "reasoner": {**reasoner, "client": "openai", "max_reasoning_seconds": MAX_SECONDS},
             "answer": answer},
        ],
    }))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY}, directory / "duet.log")
    yield server
    server.stop()


def stream(server: DuetServer, model: str) -> tuple[str, str, float]:
    """The reasoning and the content of a streamed answer, and how long it took."""
    started = time.monotonic()
    response = httpx.post(f"{server.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30,
                          json={"model": model, "stream": True, "messages": [{"role": "user", "content": "think"}]})
    assert response.status_code == 200
    events = sse_events(response.content)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "stop"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e.get("choices")]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    return reasoning, content, time.monotonic() - started


def reasoning_seen_by_answer_model(upstream: ScriptedUpstream) -> str:
    """The reasoning after the user's message in the answer model's prompt."""
    user: Any = upstream.requests_for(ANSWER)[0].body["messages"][-1]
    assert user["role"] == "user"
    return user["content"].rsplit("<reasoning>\n", 1)[1].split("\n</reasoning>", 1)[0]


def test_reasoning_is_cut_off_at_its_length_limit(bounded_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, STEPS)
    reasoning, content, _ = stream(bounded_duet, "duet-short")
    expected = "".join(STEPS.reasoning)[:MAX_CHARS]
    assert reasoning == f"{expected}\n\n[reasoning cut off at {MAX_CHARS} characters]"
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted  # the call was closed, not read to its end
    assert reasoning_seen_by_answer_model(upstream) == reasoning.strip()
    assert content == "echo: think"


def test_non_streamed_reasoning_is_cut_off_the_same_way(bounded_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, STEPS)
    response = httpx.post(f"{bounded_duet.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": "duet-short", "messages": [{"role": "user", "content": "think"}]}, timeout=30)
    assert response.status_code == 200
    message = response.json()["choices"][0]["message"]
    assert message["reasoning_content"].endswith(f"\n\n[reasoning cut off at {MAX_CHARS} characters]")
    assert message["content"] == "echo: think"


@pytest.mark.parametrize("model", ["duet-quick", "duet-quick-stock"])  # Duet's model client, and AutoGen's
def test_reasoning_is_stopped_at_its_time_limit(bounded_duet: DuetServer, upstream: ScriptedUpstream, model: str) -> None:
    upstream.script(REASONER, STEPS)
    reasoning, content, took = stream(bounded_duet, model)
    assert took < WELL_UNDER_THE_REASONERS_TIME  # the reasoning alone would take 10 s
    thought, note = reasoning.rsplit("\n\n", 1)
    assert note == f"[reasoning stopped after {MAX_SECONDS:g} s]"
    assert thought and "".join(STEPS.reasoning).startswith(thought)  # what came in time, nothing lost
    assert len(thought) < len("".join(STEPS.reasoning))
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted
    assert reasoning_seen_by_answer_model(upstream) == reasoning
    assert content == "echo: think"


def test_a_reasoner_that_says_nothing_is_stopped_at_the_time_limit(bounded_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["late"], delay=10))
    reasoning, content, took = stream(bounded_duet, "duet-quick")
    assert took < WELL_UNDER_THE_REASONERS_TIME  # its first word would come after 10 s
    assert reasoning == f"[reasoning stopped after {MAX_SECONDS:g} s]"
    assert content == "echo: think"
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted
    log = bounded_duet.log.read_text()
    assert alarming_lines(log) == [], log[-3000:]  # a limit is the service working


def test_limits_are_part_of_the_component() -> None:
    client = OpenAICompatibleClient(model=REASONER, base_url="http://127.0.0.1:9/v1")
    agent = ReasoningAgent("reasoner", client, max_reasoning_chars=1000, max_reasoning_seconds=0)  # 0: no limit
    loaded = ReasoningAgent.load_component(agent.dump_component())
    assert loaded.dump_component().config["max_reasoning_chars"] == 1000
    assert loaded.dump_component().config["max_reasoning_seconds"] == 0
    default = ReasoningAgent("reasoner", client).dump_component().config
    assert default["max_reasoning_chars"] == 40_000 and default["max_reasoning_seconds"] == 300
