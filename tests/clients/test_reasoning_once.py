"""Reasoning is paid once whatever a real client retries (issue 26): LlamaIndex's OpenAI LLM
(tests/llama_index_client.py), Claude Code and Codex CLI (tests/coding_agents.py), each with its own
default retries, against Duet whose answer model is rate-limited (429) or whose reasoner fails (500).
The scripted upstream counts the calls: no conversation reaches the reasoner twice.

The 429s carry ``Retry-After: 0``, so Duet's own two retries wait for nothing and a test waits only for
the client's backoff (bench/reasoning_once.py measures the same faults with ``Retry-After`` 1 and 7).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterator

import openai
import pytest
import yaml

from tests import coding_agents, llama_index_client
from tests.conftest import DuetServer
from tests.scripted_upstream import Reply, ScriptedUpstream

REASONER, ANSWER = "once-r1", "once-answer"
KEY = "once-clients-key"
RATE_LIMITED = Reply(status=429, error_message="slow down", headers={"Retry-After": "0"})
REASONER_DOWN = Reply(status=500, error_message="reasoner crashed")


@pytest.fixture(scope="module")
def server(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """Duet with its defaults (reuse on: conftest's servers turn it off) and the model names these clients insist on."""
    directory: Path = tmp_path_factory.mktemp("once-clients")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({
        "model_aliases": {"claude-*": "duet", llama_index_client.MODEL: "duet"},
        "pipelines": [{"name": "duet", "reasoner": {"base_url": upstream.base_url, "model": REASONER},
                       "answer": {"base_url": upstream.base_url, "model": ANSWER}}]}))
    duet = DuetServer(["--config", str(config)], {"DUET_API_KEYS": KEY, "DUET_REASONING_REUSE_SECONDS": ""}, directory / "duet.log")
    yield duet
    duet.stop()


def calls(upstream: ScriptedUpstream) -> tuple[int, int]:
    return len(upstream.requests_for(REASONER)), len(upstream.requests_for(ANSWER))


def assert_each_conversation_reasoned_once(upstream: ScriptedUpstream) -> None:
    asked = Counter(json.dumps(call.body["messages"], sort_keys=True) for call in upstream.requests_for(REASONER))
    assert asked and set(asked.values()) == {1}, asked.values()


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream_chat"])
def test_llama_index_answers_through_duet(server: DuetServer, upstream: ScriptedUpstream, stream: bool) -> None:
    upstream.script(REASONER, Reply(reasoning=["17 * 23 = 391."]))
    upstream.script(ANSWER, Reply(content=["3", "91"]))
    assert llama_index_client.chat(server.base_url, KEY, f"What is 17 * 23? (stream={stream})", stream=stream) == "391"
    assert calls(upstream) == (1, 1)


def test_llama_index_chat_retried_after_a_rate_limit_reuses_the_reasoning(server: DuetServer, upstream: ScriptedUpstream) -> None:
    """Duet's first request fails after its own retries (429, ``x-should-retry: false``: the openai SDK stops);
    LlamaIndex's decorator calls again, and that request answers with the reasoning the first one paid for."""
    upstream.script(ANSWER, RATE_LIMITED, RATE_LIMITED, RATE_LIMITED, Reply(content=["391"]))
    assert llama_index_client.chat(server.base_url, KEY, "What is 17 * 23? (rate-limited once)") == "391"
    assert calls(upstream) == (1, 4)
    first, last = upstream.requests_for(ANSWER)[0], upstream.requests_for(ANSWER)[-1]
    assert last.body["messages"] == first.body["messages"]  # the same reasoning in the answer model's prompt


def test_llama_index_stream_chat_against_a_rate_limited_answer_model(server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, *[RATE_LIMITED] * 20)
    with pytest.raises(openai.APIError):
        llama_index_client.chat(server.base_url, KEY, "What is 17 * 23? (rate-limited, streamed)", stream=True)
    assert calls(upstream) == (1, 3)  # Duet's own attempts: the stream had begun, neither the SDK nor LlamaIndex called again


def test_llama_index_gets_its_answer_from_a_duet_whose_reasoner_fails(server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, *[REASONER_DOWN] * 20)
    upstream.script(ANSWER, Reply(content=["391"]))
    assert llama_index_client.chat(server.base_url, KEY, "What is 17 * 23? (reasoner down)") == "391"
    assert calls(upstream) == (1, 1)


def test_claude_code_against_a_rate_limited_answer_model(server: DuetServer, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(ANSWER, *[RATE_LIMITED] * 100)
    finished = coding_agents.claude_code(server.base_url, KEY, "What is 17 * 23?", tmp_path, tmp_path / "home", timeout=120)
    assert finished.returncode not in (0, None), finished  # it gave up on its own, well within the bound
    assert_each_conversation_reasoned_once(upstream)


def test_claude_code_gets_its_answer_from_a_duet_whose_reasoner_fails(server: DuetServer, upstream: ScriptedUpstream,
                                                                      tmp_path: Path) -> None:
    upstream.script(REASONER, *[REASONER_DOWN] * 20)
    upstream.set_default(lambda body: Reply(content=["It is 391."]))
    finished = coding_agents.claude_code(server.base_url, KEY, "What is 17 * 23?", tmp_path, tmp_path / "home", timeout=120)
    assert finished.returncode == 0 and "391" in finished.stdout, finished
    assert_each_conversation_reasoned_once(upstream)


def test_codex_against_a_rate_limited_answer_model(server: DuetServer, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(ANSWER, *[RATE_LIMITED] * 100)
    finished = coding_agents.codex_exec(server.base_url, KEY, "What is 17 * 23?", tmp_path, tmp_path / "home", timeout=120)
    assert finished.returncode not in (0, None), finished
    assert_each_conversation_reasoned_once(upstream)
    assert len(upstream.requests_for(ANSWER)) > 3  # Codex did retry: each retry was answered without a new reasoning


def test_codex_gets_its_answer_from_a_duet_whose_reasoner_fails(server: DuetServer, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    upstream.script(REASONER, *[REASONER_DOWN] * 20)
    upstream.set_default(lambda body: Reply(content=["It is 391."]))
    finished = coding_agents.codex_exec(server.base_url, KEY, "What is 17 * 23?", tmp_path, tmp_path / "home", timeout=120)
    assert finished.returncode == 0 and "It is 391." in finished.stdout, finished
    assert_each_conversation_reasoned_once(upstream)
