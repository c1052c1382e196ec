"""Reasoning is paid once (issue 26), over real HTTP: the scripted upstream counts every model call.

A request that fails after its reasoning (the answer model's 429 or 5xx), or that its client simply
sends again, reuses that reasoning instead of calling the reasoner again: with the openai SDK's own
retries too. Never across API keys; off with the switch. A long ``Retry-After`` is passed on at once,
with its header and the real status (a streamed retry included); a failing reasoner costs the answer
its reasoning, not the request.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest
import yaml

from tests.conftest import DuetServer, sse_events
from tests.scripted_upstream import Reply, ScriptedUpstream

REASONER, ANSWER = "once-r1", "once-answer"
KEY, OTHER_KEY = "once-key-0001", "once-key-0002"


def config(upstream_url: str) -> dict[str, Any]:
    quick = {"base_url": upstream_url, "retry_backoff": 0.01, "max_retry_wait": 0.5}
    reasoner = {**quick, "model": REASONER}
    answer = {**quick, "model": ANSWER}
    return {
        "ping_interval": 3.0,
        "pipelines": [
            {"name": "once", "reasoner": reasoner, "answer": answer},
            {"name": "once-off", "reasoner": {**reasoner, "reuse_seconds": 0}, "answer": answer},
            {"name": "once-fail", "reasoner": {**reasoner, "on_failure": "fail"}, "answer": answer},
        ],
    }


@pytest.fixture(scope="module")
def server(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory: Path = tmp_path_factory.mktemp("once")
    path = directory / "duet.yaml"
    path.write_text(yaml.safe_dump(config(upstream.base_url)))
    # "": no service-wide override, each pipeline's own reuse_seconds (conftest turns reuse off by default).
    duet = DuetServer(["--config", str(path)], {"DUET_API_KEYS": f"{KEY},{OTHER_KEY}", "DUET_REASONING_REUSE_SECONDS": ""},
                      directory / "duet.log")
    yield duet
    duet.stop()


def post(server: DuetServer, body: dict[str, Any], key: str = KEY, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}", **headers})


def question(text: str, model: str = "once", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


RATE_LIMITED = Reply(status=429, error_message="slow down", headers={"Retry-After": "7"})


def test_a_long_retry_after_is_passed_on_at_once_and_the_retry_reuses_the_reasoning(
        server: DuetServer, upstream: ScriptedUpstream) -> None:
    body = question("What is 17 * 23? (429 once)")
    upstream.script(REASONER, Reply(reasoning=["17 * 23 ", "is 391."]))
    upstream.script(ANSWER, RATE_LIMITED)
    started = time.monotonic()
    refused = post(server, body)
    assert refused.status_code == 429 and time.monotonic() - started < 5  # not two waits of 7 s
    assert refused.headers["retry-after"] == "7" and refused.headers["x-should-retry"] == "true"
    assert len(upstream.requests_for(ANSWER)) == 1  # a Retry-After above max_retry_wait is not waited out

    upstream.script(ANSWER, Reply(content=["391."]))
    retried = post(server, body)
    assert retried.status_code == 200, retried.text
    message = retried.json()["choices"][0]["message"]
    assert message["content"] == "391." and message["reasoning_content"] == "17 * 23 is 391."
    assert len(upstream.requests_for(REASONER)) == 1  # the reasoning was paid once
    assert "17 * 23 is 391." in upstream.requests_for(ANSWER)[-1].body["messages"][-1]["content"]


def test_a_streamed_retry_gets_the_real_status_when_the_answer_model_fails_again(
        server: DuetServer, upstream: ScriptedUpstream) -> None:
    body = question("Stream me, even rate-limited.", stream=True)
    upstream.script(REASONER, Reply(reasoning=["Plan ", "it."]))
    upstream.script(ANSWER, RATE_LIMITED, RATE_LIMITED)
    first = post(server, body)
    assert first.status_code == 200  # committed with the reasoning: the failure is the stream's last event
    events = sse_events(first.content)
    assert events[-1]["error"]["code"] == "rate_limit_exceeded"
    second = post(server, body)  # its reasoning is reused: the status is held back past it
    assert second.status_code == 429 and second.headers["retry-after"] == "7"
    assert second.json()["error"]["code"] == "rate_limit_exceeded"
    assert len(upstream.requests_for(REASONER)) == 1


def test_the_openai_sdk_retrying_a_rate_limited_answer_costs_one_reasoner_call(
        server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Think ", "once."]))
    quick_limit = Reply(status=429, error_message="slow down", headers={"Retry-After": "1"})
    upstream.script(ANSWER, quick_limit, quick_limit, quick_limit)
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=KEY)  # the SDK's default: 2 retries
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(**question("SDK retries, please."))  # type: ignore[call-overload]
    assert len(upstream.requests_for(ANSWER)) == 3  # one per attempt of the SDK: Duet waits out no 1 s Retry-After
    assert len(upstream.requests_for(REASONER)) == 1  # one reasoner call per user call


def test_a_success_the_client_sends_again_is_not_thought_again(server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Say hi."]))
    upstream.script(ANSWER, Reply(content=["Hi!"]), Reply(content=["Hi again!"]))
    assert post(server, question("Hello there, once.")).status_code == 200
    assert post(server, question("Hello there, once.")).json()["choices"][0]["message"]["reasoning_content"] == "Say hi."
    assert len(upstream.requests_for(REASONER)) == 1


def test_reasoning_is_never_reused_across_keys_nor_with_the_switch_off(server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Mine."]), Reply(reasoning=["Theirs."]), Reply(reasoning=["Off 1."]),
                    Reply(reasoning=["Off 2."]))
    assert post(server, question("Whose reasoning?")).status_code == 200
    other = post(server, question("Whose reasoning?"), key=OTHER_KEY)
    assert other.json()["choices"][0]["message"]["reasoning_content"] == "Theirs."
    for expected in ("Off 1.", "Off 2."):
        reply = post(server, question("Whose reasoning?", model="once-off"))
        assert reply.json()["choices"][0]["message"]["reasoning_content"] == expected
    assert len(upstream.requests_for(REASONER)) == 4


def test_a_failing_reasoner_costs_the_reasoning_not_the_answer(server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(status=500, error_message="reasoner crashed"))
    upstream.script(ANSWER, Reply(content=["Answered alone."]))
    reply = post(server, question("Does the answer survive?"))
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    assert message["content"] == "Answered alone." and "reasoning model was unavailable" in message["reasoning_content"]
    assert len(upstream.requests_for(REASONER)) == 1  # one attempt: no internal retry of a failing reasoner
    assert "<reasoning>" not in str(upstream.requests_for(ANSWER)[0].body["messages"])


def test_with_on_failure_fail_an_upstream_5xx_tells_sdks_not_to_retry(server: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(status=500, error_message="reasoner crashed"))
    reply = post(server, question("Fail loudly.", model="once-fail"))
    assert reply.status_code == 502 and reply.headers["x-should-retry"] == "false"
    assert upstream.requests_for(ANSWER) == []
