"""The Vercel AI SDK against Duet over real HTTP: ``streamText`` with a tool loop through
``@ai-sdk/openai``'s Responses model (``/v1/responses``) and ``@ai-sdk/anthropic`` (``/v1/messages``).
The SDK runs the tool itself (its ``execute``) and sends the result back in its next step; the
scripted upstream plays the models. Off the happy path: an upstream 429 and an unknown model (the
SDK's ``APICallError``), a fault mid-stream (its error part), an abort mid-stream (the models stop).
``make test`` installs the packages (scripts/ensure-ai-sdk)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, ROOT, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from tests.waiting import settle

MODULES = Path(sys.prefix) / "ai-sdk"
CLIENT = ROOT / "tests" / "ai_sdk_client.mjs"
PROVIDERS = ["openai", "anthropic"]
FORECAST = "sunny, 24C"
PROMPT = "Weather in Paris?"


def stream_text(duet: DuetServer, provider: str, model: str = "duet", hang_up_on: str = "") -> dict[str, Any]:
    """Runs the SDK's ``streamText`` in Node; returns what it saw. ``hang_up_on``: a stream part type
    on whose first arrival the application aborts."""
    assert (MODULES / "node_modules" / "ai").is_dir(), f"the AI SDK is missing: run scripts/ensure-ai-sdk {MODULES} (make test does)"
    done = subprocess.run(["node", str(CLIENT), str(MODULES), duet.base_url, API_KEY, model, provider, PROMPT, FORECAST, hang_up_on],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [message for message in body["messages"] if message["role"] == "tool"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stream_text_runs_the_tool_loop(duet: DuetServer, upstream: ScriptedUpstream, provider: str) -> None:
    upstream.script(REASONER, Reply(reasoning=["Ask the ", "weather tool."], usage=(10, 4)))
    upstream.script(ANSWER, Reply(content=["Checking."], tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}', pieces=3)], usage=(20, 6)))

    def answer_from_the_result(body: dict[str, Any]) -> Reply:
        return Reply(content=["Paris: ", tool_results(body)[-1]["content"], "."], usage=(30, 5))

    upstream.script(ANSWER, answer_from_the_result)
    seen = stream_text(duet, provider)

    assert seen["errors"] == [] and seen["executed"] == ["Paris"]  # the SDK ran the tool once
    # Nothing Duet sent was ignored or unsupported; @ai-sdk/anthropic only caps its default max_tokens for a model id it does not know.
    assert all(warning["feature"] == "maxOutputTokens" for warning in seen["warnings"]), seen["warnings"]
    first, second = seen["steps"]
    assert first["finishReason"] == "tool-calls"
    [call] = first["toolCalls"]
    assert (call["toolName"], call["input"]) == ("get_weather", {"city": "Paris"})
    assert [result["toolCallId"] for result in first["toolResults"]] == [call["toolCallId"]]
    assert second["toolCalls"] == [] and second["text"] == f"Paris: {FORECAST}."
    assert seen["text"] == f"Paris: {FORECAST}." and seen["finishReason"] == "stop"
    assert seen["reasoning"][0] == "Ask the weather tool."  # Duet's reasoning, as the SDK's own reasoning parts
    assert {"reasoning-delta", "tool-call", "tool-result", "text-delta", "finish-step", "finish"} <= set(seen["parts"])
    assert seen["usage"]["inputTokens"] == 30 + 30 and seen["usage"]["outputTokens"] == 10 + 5  # both steps, both stages

    first_call, second_call = upstream.requests_for(ANSWER)
    assert [tool["function"]["name"] for tool in first_call.body["tools"]] == ["get_weather"]
    sent = second_call.body["messages"]  # the SDK's second request carried the call and its result
    # The upstream gets back the id it issued (issue 25); the SDK saw Duet's.
    issued = sent[-2]["tool_calls"][0]["id"]
    assert issued != call["toolCallId"] and sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert sent[-1] == {"role": "tool", "tool_call_id": issued, "content": FORECAST}
    assert len(upstream.requests_for(REASONER)) == 1  # a round that only brings tool results skips the reasoner


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_upstream_429_before_the_first_byte_is_the_sdks_api_call_error(duet: DuetServer, upstream: ScriptedUpstream,
                                                                          provider: str) -> None:
    upstream.script(REASONER, Reply(status=429, error_message="slow down", headers={"Retry-After": "30"}))  # beyond what Duet waits out
    seen = stream_text(duet, provider)
    [error] = seen["errors"]
    assert error["name"] == "AI_APICallError" and error["statusCode"] == 429 and error["isRetryable"] is True
    assert "slow down" in error["message"]
    assert seen["executed"] == [] and upstream.requests_for(ANSWER) == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_unknown_model_is_the_sdks_api_call_error_404(duet: DuetServer, upstream: ScriptedUpstream, provider: str) -> None:
    seen = stream_text(duet, provider, model="gpt-nothing")
    [error] = seen["errors"]
    assert error["name"] == "AI_APICallError" and error["statusCode"] == 404 and "gpt-nothing" in error["message"]
    assert upstream.requests == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_upstream_fault_mid_stream_is_an_error_part_after_the_text_so_far(duet: DuetServer, upstream: ScriptedUpstream,
                                                                             provider: str) -> None:
    upstream.script(ANSWER, Reply(content=[f"part {i} " for i in range(10)], fault="disconnect", fault_after=3))
    seen = stream_text(duet, provider)
    [error] = seen["errors"]  # the provider's own reading of Duet's one error event (response.failed / error)
    assert "broke off the stream" in error["value"]["message"]
    assert seen["parts"][-3:] == ["error", "finish-step", "finish"] and seen["streamFinishReason"] == "error"
    assert seen["streamedText"].startswith("part 0 ") and "part 9" not in seen["streamedText"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_abort_mid_stream_stops_the_models(duet: DuetServer, upstream: ScriptedUpstream, provider: str) -> None:
    baseline = duet.wait_idle()["tasks"]
    upstream.script(REASONER, Reply(reasoning=[f"step {i} " for i in range(40)], delay_between=0.25))
    seen = stream_text(duet, provider, hang_up_on="reasoning-delta")
    assert seen["parts"][-1] == "abort" and seen["errors"] == [] and seen["executed"] == []
    reasoner_call = upstream.requests_for(REASONER)[0]
    assert reasoner_call.ended.wait(5) and reasoner_call.aborted  # Duet stopped the model the SDK no longer listens to
    assert upstream.requests_for(ANSWER) == []
    settle(duet, baseline)
