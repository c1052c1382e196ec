"""Dify's own client code (``dify-plugin``'s ``OAICompatLargeLanguageModel``) against Duet.

The client runs in a worker process (``tests/dify_client.py``), gevent-patched as in Dify.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Iterator

import pytest

from duet.agents._model_reasoning import REASONING_NOT_KEPT
from tests.conftest import ANSWER, API_KEY, REASONER, ROOT, THINKING_ANSWER, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream, users_words

SEARCH = {
    "name": "web_search",
    "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}
QUESTION = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "What is Duet?"}]


class DifyError(Exception):
    """An exception Dify's client raised, with its type name and message."""


class Dify:
    """Calls into the Dify worker process."""

    def __init__(self, worker: subprocess.Popen[str], duet: DuetServer) -> None:
        self._worker = worker
        self._duet = duet

    def _call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        assert self._worker.stdin is not None and self._worker.stdout is not None
        self._worker.stdin.write(json.dumps({"function": function, "args": args, "kwargs": kwargs}) + "\n")
        self._worker.stdin.flush()
        answer = json.loads(self._worker.stdout.readline())
        if "error" in answer:
            raise DifyError(f"{answer['error']}: {answer['message']}")
        return answer["result"]

    def credentials(self, **extra: Any) -> dict[str, Any]:
        """What a Dify user enters for an "OpenAI-API-compatible" model, as the manual recommends (docs/clients.md)."""
        return {
            "endpoint_url": f"{self._duet.base_url}/v1",
            "api_key": API_KEY,
            "mode": "chat",
            "function_calling_type": "tool_call",
            "stream_function_calling": "supported",
            "context_size": "32768",
            "max_tokens_to_sample": "4096",
            **extra,
        }

    def validate(self, model: str = "duet", **extra: Any) -> None:
        self._call("validate", model, self.credentials(**extra))

    def invoke(self, messages: list[dict[str, Any]], *, model: str = "duet", parameters: dict[str, Any] | None = None,
               credentials: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        return self._call("invoke", model, credentials or self.credentials(), messages, parameters or {}, **kwargs)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def dify_worker() -> Iterator[subprocess.Popen[str]]:
    worker = subprocess.Popen([sys.executable, "-m", "tests.dify_client"], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    yield worker
    worker.terminate()
    worker.wait(10)


@pytest.fixture
def dify(dify_worker: subprocess.Popen[str], duet: DuetServer) -> Dify:
    return Dify(dify_worker, duet)


def test_validate_credentials(dify: Dify, upstream: ScriptedUpstream) -> None:
    dify.validate()
    ping = upstream.requests_for(ANSWER)[-1].body
    assert ping["max_tokens"] == 5 and ping["messages"][-1]["role"] == "user"
    assert users_words(ping["messages"][-1]["content"]) == "ping"  # then the reasoning's note (issue 26)


def test_validate_credentials_rejects_a_wrong_key_or_model(dify: Dify) -> None:
    with pytest.raises(DifyError, match=r"CredentialsValidateFailedError.*401"):
        dify.validate(api_key="wrong")
    with pytest.raises(DifyError, match=r"CredentialsValidateFailedError.*model_not_found"):
        dify.validate("no-such-model")


@pytest.mark.parametrize("stream", [True, False])
def test_agent_round_trip(dify: Dify, upstream: ScriptedUpstream, stream: bool) -> None:
    """One function-calling agent turn, as Dify runs it: tool call out, tool result back, answer."""
    upstream.script(REASONER, Reply(reasoning=["Search ", "first."]))
    upstream.script(ANSWER, Reply(content=["Let me search."], tool_calls=[ScriptedCall("web_search", '{"query": "duet"}', pieces=5)]))
    result = dify.invoke(QUESTION, parameters={"temperature": 0.2, "max_tokens": 512}, tools=[SEARCH], stream=stream)
    # Dify shows streamed reasoning_content as a <think> block; its non-stream parser reads content only.
    assert result["text"] == ("<think>\nSearch first.\n</think>Let me search." if stream else "Let me search.")
    [call] = result["tool_calls"]
    assert call["name"] == "web_search" and json.loads(call["arguments"]) == {"query": "duet"}
    assert result["usage"]["prompt_tokens"] > 0 and result["usage"]["completion_tokens"] > 0
    sent = upstream.requests_for(ANSWER)[0].body
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 512 and sent["tool_choice"] == "auto"

    upstream.script(ANSWER, lambda body: Reply(content=[f"Found: {body['messages'][-1]['content']}"]))
    follow_up = [
        *QUESTION,
        {"role": "assistant", "content": result["text"], "tool_calls": [call]},  # with the <think> text it showed
        {"role": "tool", "content": "Duet is a reasoning pair.", "tool_call_id": call["id"]},
    ]
    second = dify.invoke(follow_up, tools=[SEARCH], stream=stream)
    assert second["text"] == "Found: Duet is a reasoning pair."
    assert second["tool_calls"] == []
    history = upstream.requests_for(ANSWER)[1].body["messages"]
    assert history[-2]["content"] == "Let me search."  # the think block was stripped
    # The upstream gets back the id it issued (issue 25), not the one Dify saw.
    issued = history[-2]["tool_calls"][0]["id"]
    assert issued != call["id"] and history[-1] == {"role": "tool", "tool_call_id": issued, "content": "Duet is a reasoning pair."}


def test_usage_stop_and_user(dify: Dify, upstream: ScriptedUpstream) -> None:
    """Dify reads the usage chunk; ReAct agents rely on ``stop``; ``user`` is passed on."""
    upstream.script(ANSWER, Reply(content=["Hi"], usage=(11, 1)))
    result = dify.invoke([{"role": "user", "content": "Hi"}], stop=["Observation"], user="dify-user-1")
    assert result["text"].endswith("Hi") and result["usage"]["completion_tokens"] == 3 + 1
    assert upstream.requests_for(ANSWER)[0].body["stream_options"] == {"include_usage": True}  # Duet's own upstream call
    sent = upstream.requests_for(ANSWER)[0].body
    assert sent["stop"] == ["Observation"] and sent["user"] == "dify-user-1"


def test_parallel_calls_survive_difys_merge(dify: Dify, upstream: ScriptedUpstream) -> None:
    calls = [ScriptedCall("web_search", json.dumps({"query": q}), pieces=4) for q in ("a", "b", "c")]
    upstream.script(ANSWER, Reply(tool_calls=calls, interleave_calls=True))
    merged = dify.invoke([{"role": "user", "content": "go"}], tools=[SEARCH])["tool_calls"]
    assert [json.loads(c["arguments"]) for c in merged] == [{"query": "a"}, {"query": "b"}, {"query": "c"}]
    assert len({c["id"] for c in merged}) == 3


def test_legacy_function_call_mode(dify: Dify, upstream: ScriptedUpstream) -> None:
    credentials = dify.credentials(function_calling_type="function_call")
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("web_search", '{"query": "x"}')]))
    result = dify.invoke([{"role": "user", "content": "go"}], credentials=credentials, tools=[SEARCH], stream=False, raw=True)
    [call] = result["tool_calls"]
    assert call["name"] == "web_search" and json.loads(call["arguments"]) == {"query": "x"}

    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("web_search", '{"query": "y"}')]))
    calls = dify.invoke([{"role": "user", "content": "go"}], credentials=credentials, tools=[SEARCH])["tool_calls"]
    assert [json.loads(c["arguments"]) for c in calls] == [{"query": "y"}]

    upstream.script(ANSWER, lambda body: Reply(content=[f"got {body['messages'][-1]['content']}"]))
    follow_up = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": calls},
                 {"role": "tool", "content": "result-y", "tool_call_id": calls[0]["id"]}]
    # A legacy function_call carries no id, so the round's reasoning cannot be restored: the reasoner thinks again.
    assert dify.invoke(follow_up, credentials=credentials, tools=[SEARCH])["text"] == "<think>\nThinking about it.\n</think>got result-y"
    assert len(upstream.requests_for(REASONER)) == 3


def test_think_output_mode_for_dify(dify: Dify, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["inline ", "thoughts"]))
    upstream.script(ANSWER, Reply(content=["Answer."]))
    for stream in (True, False):
        result = dify.invoke([{"role": "user", "content": "q"}], model="duet-think", stream=stream)
        assert result["text"] == "<think>\ninline thoughts\n</think>\n\nAnswer."
        upstream.script(REASONER, Reply(reasoning=["inline ", "thoughts"]))
        upstream.script(ANSWER, Reply(content=["Answer."]))


def test_mid_stream_failure_surfaces_as_an_error(dify: Dify, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(content=["partial ", "answer"], fault="disconnect", fault_after=2))
    with pytest.raises(DifyError, match=r"broke off the stream|ended the stream"):
        dify.invoke([{"role": "user", "content": "q"}])


def test_dify_sees_only_its_own_tools_in_a_mixed_round(dify: Dify, upstream: ScriptedUpstream) -> None:
    """The answer model calls a service tool and a Dify tool at once: Dify gets only its own call,
    and its follow-up brings the whole round back to the model."""
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("lookup_customer", '{"email": "a@b.c"}'),
                                              ScriptedCall("web_search", '{"query": "Ada"}')]))
    first = dify.invoke([{"role": "user", "content": "Who is a@b.c?"}], model="duet-functions", tools=[SEARCH])
    assert [c["name"] for c in first["tool_calls"]] == ["web_search"]

    upstream.script(ANSWER, lambda body: Reply(content=[" + ".join(m["content"][:40] for m in body["messages"] if m["role"] == "tool")]))
    follow_up = [{"role": "user", "content": "Who is a@b.c?"},
                 {"role": "assistant", "content": first["text"], "tool_calls": first["tool_calls"]},
                 {"role": "tool", "content": "Ada is a mathematician.", "tool_call_id": first["tool_calls"][0]["id"]}]
    second = dify.invoke(follow_up, model="duet-functions", tools=[SEARCH])
    assert second["text"].startswith('{"email": "a@b.c", "name": "Ada"') and second["text"].endswith(" + Ada is a mathematician.")


@pytest.mark.parametrize("stream", [True, False])
def test_agent_over_a_thinking_answer_model(dify: Dify, upstream: ScriptedUpstream, stream: bool) -> None:
    """A multi-round Dify agent whose answer model is a thinking model that refuses a tool turn
    without its reasoning (DeepSeek's thinking mode): a service tool and a Dify tool in the first
    round, Dify's results, then a new question over history Dify rebuilt with fresh call ids."""
    upstream.require_reasoning_back(THINKING_ANSWER)
    user = {"role": "user", "content": "Who is a@b.c?"}
    upstream.script(THINKING_ANSWER,
                    Reply(reasoning=["Look up the customer."], tool_calls=[ScriptedCall("lookup_customer", '{"email": "a@b.c"}')]),
                    Reply(reasoning=["Search for her."], content=["Searching."], tool_calls=[ScriptedCall("web_search", '{"query": "Ada"}')]))
    first = dify.invoke([user], model="duet-thinking", tools=[SEARCH], stream=stream)
    [call] = first["tool_calls"]
    assert call["name"] == "web_search" and first["text"].endswith("Searching.")

    upstream.script(THINKING_ANSWER, Reply(reasoning=["She is found."], content=["Ada Lovelace."]))
    round_one = [user, {"role": "assistant", "content": first["text"], "tool_calls": [call]},
                 {"role": "tool", "content": "Ada Lovelace, mathematician.", "tool_call_id": call["id"]}]
    second = dify.invoke(round_one, model="duet-thinking", tools=[SEARCH], stream=stream)
    assert second["text"].endswith("Ada Lovelace.")
    kept = [t["reasoning_content"] for t in upstream.requests_for(THINKING_ANSWER)[2].body["messages"] if t.get("tool_calls")]
    assert kept == ["Look up the customer.", "Search for her."]  # each tool turn with its own reasoning

    # The next question: Dify rebuilds the earlier turn from its database, with a fresh call id.
    rebuilt = [user, {"role": "assistant", "content": first["text"], "tool_calls": [{**call, "id": "dify-fresh-1"}]},
               {"role": "tool", "content": "Ada Lovelace, mathematician.", "tool_call_id": "dify-fresh-1"},
               {"role": "assistant", "content": second["text"]}, {"role": "user", "content": "When was she born?"}]
    upstream.script(THINKING_ANSWER, Reply(reasoning=["Search again."], tool_calls=[ScriptedCall("web_search", '{"query": "Ada born"}')]))
    third = dify.invoke(rebuilt, model="duet-thinking", tools=[SEARCH], stream=stream)
    [again] = third["tool_calls"]
    upstream.script(THINKING_ANSWER, Reply(reasoning=["1815."], content=["In 1815."]))
    fourth = dify.invoke([*rebuilt, {"role": "assistant", "content": third["text"], "tool_calls": [again]},
                          {"role": "tool", "content": "born 10 December 1815", "tool_call_id": again["id"]}],
                         model="duet-thinking", tools=[SEARCH], stream=stream)
    assert fourth["text"].endswith("In 1815.")
    requests = upstream.requests_for(THINKING_ANSWER)
    assert len(requests) == 5  # no request was refused
    old_turn, new_turn = [m for m in requests[-1].body["messages"] if m.get("tool_calls")]
    assert new_turn["reasoning_content"] == "Search again."
    # The rebuilt turn's reasoning: the <think> text Dify kept when it streamed (a note otherwise, never empty).
    if stream:
        assert "Search for her." in old_turn["reasoning_content"]
    else:
        assert old_turn["reasoning_content"] == REASONING_NOT_KEPT
