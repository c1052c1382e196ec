"""A team exported for AutoGen Studio (``duet export-team --studio``: models as AutoGen's stock
``OpenAIChatCompletionClient``) and served with ``duet serve --team`` reports the tokens its two
model calls used, streamed and not.

The stock client streams without ``stream_options.include_usage`` unless asked, and the scripted
upstream sends usage only when asked: the agents must ask."""

from __future__ import annotations

import json
import subprocess
from typing import Iterator

import httpx
import pytest

from tests.conftest import ANSWER, API_KEY, DUET, REASONER, ROOT, DuetServer, sse_events
from tests.scripted_upstream import Reply, ScriptedUpstream

QUESTION = [{"role": "user", "content": "How many tokens?"}]
REASONER_USAGE = (11, 3)
ANSWER_USAGE = (17, 5)


@pytest.fixture(scope="module")
def studio_team_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory = tmp_path_factory.mktemp("studio-usage")
    config = directory / "duet.yaml"
    config.write_text(json.dumps({"pipelines": [{"name": "duet", "reasoner": {"base_url": upstream.base_url, "model": REASONER},
                                                 "answer": {"base_url": upstream.base_url, "model": ANSWER}}]}))
    team_file = directory / "team.json"
    subprocess.run([DUET, "export-team", "--studio", "--config", str(config), "-o", str(team_file)],
                   check=True, timeout=60, cwd=ROOT, capture_output=True)
    providers = {p["config"]["model_client"]["provider"] for p in json.loads(team_file.read_text())["config"]["participants"]}
    assert providers == {"autogen_ext.models.openai.OpenAIChatCompletionClient"}  # the stock client, as Studio gets it
    server = DuetServer(["--team", str(team_file), "--model-name", "studio-team"],
                        {"DUET_API_KEYS": API_KEY, "OPENAI_API_KEY": "not-needed"}, directory / "duet.log")
    yield server
    server.stop()


def script_both_models(upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Count ", "them."], usage=REASONER_USAGE))
    upstream.script(ANSWER, Reply(content=["Twenty-", "eight."], usage=ANSWER_USAGE))


def assert_usage(usage: dict[str, int], upstream: ScriptedUpstream) -> None:
    assert usage["prompt_tokens"] == REASONER_USAGE[0] + ANSWER_USAGE[0]
    assert usage["completion_tokens"] == REASONER_USAGE[1] + ANSWER_USAGE[1]
    assert usage["total_tokens"] == sum(REASONER_USAGE) + sum(ANSWER_USAGE)
    for model in (REASONER, ANSWER):
        assert upstream.requests_for(model)[-1].body["stream_options"] == {"include_usage": True}


def test_streamed_studio_team_reports_usage(studio_team_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    script_both_models(upstream)
    response = httpx.post(f"{studio_team_duet.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": "studio-team", "stream": True, "messages": QUESTION,
                                "stream_options": {"include_usage": True}}, timeout=30)
    assert response.status_code == 200, response.text
    chunks = sse_events(response.content)
    assert chunks[-1] == "[DONE]" and chunks[-2]["choices"] == []
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-2] if c["choices"])
    assert content == "Twenty-eight."
    assert_usage(chunks[-2]["usage"], upstream)


def test_non_streamed_studio_team_reports_usage(studio_team_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    script_both_models(upstream)
    response = httpx.post(f"{studio_team_duet.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": "studio-team", "messages": QUESTION}, timeout=30)
    assert response.status_code == 200, response.text
    completion = response.json()
    assert completion["choices"][0]["message"]["content"] == "Twenty-eight."
    assert completion["choices"][0]["message"]["reasoning_content"] == "Count them."
    assert_usage(completion["usage"], upstream)
