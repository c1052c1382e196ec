"""Every token counted (issue 26), over real HTTP: the reasoner's tokens when Duet closes its call at
the end of its thinking (an estimate, labelled as such), and the prompt tokens the upstreams read from
their caches, in the metrics, the request's log line and each protocol's usage."""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from tests.conftest import DuetServer
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.http.test_observability import ANSWER, API_KEY, REASONER, request_line, scrape, start

USER = [{"role": "user", "content": "Count me."}]


@pytest.fixture(scope="module")
def counted(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    server = start(upstream, tmp_path_factory.mktemp("counted"), {"DUET_LOG_FORMAT": "json"})
    yield server
    server.stop()


def post(server: DuetServer, path: str, body: dict[str, object]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=30)


def test_a_reasoner_closed_at_the_end_of_its_thinking_is_counted_as_an_estimate(
        counted: DuetServer, upstream: ScriptedUpstream) -> None:
    before = scrape(counted)
    # A draft answer after the thinking: Duet closes the call there, and the upstream's usage never comes.
    upstream.script(REASONER, Reply(reasoning=["Think ", "it ", "through."], content=["Draft ", "nobody ", "reads."],
                                    delay_between=0.05))
    upstream.script(ANSWER, Reply(content=["Done."], usage=(30, 2)))
    reply = post(counted, "/v1/chat/completions", {"model": "duet", "messages": USER})
    assert reply.status_code == 200, reply.text
    after = scrape(counted)
    grew = after.value("duet_tokens_total", stage="reasoner", direction="output", source="estimate") \
        - before.value("duet_tokens_total", stage="reasoner", direction="output", source="estimate")
    assert grew > 0
    assert after.value("duet_tokens_total", stage="answer", direction="input", source="upstream") \
        - before.value("duet_tokens_total", stage="answer", direction="input", source="upstream") == 30
    usage = reply.json()["usage"]
    assert usage["completion_tokens"] == 2 + grew  # the response's usage counts the estimate too
    line = request_line(counted, reply.headers["x-request-id"])
    assert line["reasoner"]["tokens_source"] == "estimate" and line["reasoner"]["tokens_out"] == grew


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_cached_prompt_tokens_are_passed_on_and_counted(counted: DuetServer, upstream: ScriptedUpstream, path: str) -> None:
    before = scrape(counted)
    upstream.script(REASONER, Reply(reasoning=["Short."], usage=(20, 3), cached_tokens=16))
    upstream.script(ANSWER, Reply(content=["Cached."], usage=(50, 2), cached_tokens=40))
    body: dict[str, object] = {"model": "duet", "messages": USER} if path != "/v1/responses" else {"model": "duet", "input": "Count me."}
    if path == "/v1/messages":
        body["max_tokens"] = 50
    reply = post(counted, path, body)
    assert reply.status_code == 200, reply.text
    usage = reply.json()["usage"]
    if path == "/v1/chat/completions":
        assert usage["prompt_tokens"] == 70 and usage["prompt_tokens_details"] == {"cached_tokens": 56}
    elif path == "/v1/responses":
        assert usage["input_tokens"] == 70 and usage["input_tokens_details"] == {"cached_tokens": 56}
    else:  # Anthropic counts cache reads apart from input_tokens
        assert usage["input_tokens"] == 14 and usage["cache_read_input_tokens"] == 56
    after = scrape(counted)
    assert after.value("duet_tokens_total", direction="cached", source="upstream") \
        - before.value("duet_tokens_total", direction="cached", source="upstream") == 56
