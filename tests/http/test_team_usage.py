"""A team file as ``duet export-team`` writes it by default (Duet's own model client), served with
``duet serve --team``, reports both stages' usage (issue 26): the reasoner's as its upstream counted
it, or, when Duet closed the call at the end of the thinking, its estimate; and honours reuse."""

from __future__ import annotations

import json
import subprocess
from typing import Iterator

import httpx
import pytest

from tests.conftest import ANSWER, API_KEY, DUET, REASONER, ROOT, DuetServer
from tests.scripted_upstream import Reply, ScriptedUpstream

QUESTION = [{"role": "user", "content": "How many tokens, from a team file?"}]


@pytest.fixture(scope="module")
def team_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory = tmp_path_factory.mktemp("team-usage")
    config = directory / "duet.yaml"
    config.write_text(json.dumps({"pipelines": [{"name": "duet", "reasoner": {"base_url": upstream.base_url, "model": REASONER},
                                                 "answer": {"base_url": upstream.base_url, "model": ANSWER}}]}))
    team_file = directory / "team.json"
    subprocess.run([DUET, "export-team", "--config", str(config), "-o", str(team_file)], check=True, timeout=60, cwd=ROOT,
                   capture_output=True)
    server = DuetServer(["--team", str(team_file), "--model-name", "team"], {"DUET_API_KEYS": API_KEY}, directory / "duet.log")
    yield server
    server.stop()


def ask(server: DuetServer) -> dict[str, int]:
    response = httpx.post(f"{server.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": "team", "messages": QUESTION}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["usage"]  # type: ignore[no-any-return]


def test_a_default_team_file_reports_both_stages(team_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Count ", "them."], usage=(11, 3)))
    upstream.script(ANSWER, Reply(content=["Twenty-eight."], usage=(17, 5)))
    assert ask(team_duet) == {"prompt_tokens": 28, "completion_tokens": 8, "total_tokens": 36,
                              "completion_tokens_details": {"reasoning_tokens": 3}}


def test_a_reasoner_closed_early_in_a_team_file_is_estimated(team_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Think."], content=["A draft ", "nobody reads."], delay_between=0.05,
                                    usage=(11, 30)))
    upstream.script(ANSWER, Reply(content=["Done."], usage=(17, 5)))
    usage = ask(team_duet)
    assert usage["prompt_tokens"] > 17 and usage["completion_tokens"] > 5  # the reasoner's share is in, estimated
