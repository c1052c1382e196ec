"""Clients that hang up at any point of a request: the service logs nothing alarming, and a request
whose client left before its run started never calls a model."""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import httpx
import pytest
import yaml
from autogen_core import CancellationToken

from duet.agents import AnswerSettings, Duet, Failed, PipelineSettings, ReasonerSettings
from duet.agents.pipeline import TeamFactory
from duet.agents.pipeline._pool import TeamSlot
from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.hang_ups import alarming_lines, hang_ups
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.waiting import eventually, wait_for

ABORTS = 300
AT_ONCE = 20


@pytest.fixture(scope="module")
def abort_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """A server of its own: its log holds only these hang-ups, and the upstream connections it pools
    close with it (the upstream is shared with the other tests)."""
    directory = tmp_path_factory.mktemp("aborts")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump({
        "pipelines": [{"name": "duet", "reasoner": {"base_url": upstream.base_url, "model": REASONER},
                       "answer": {"base_url": upstream.base_url, "model": ANSWER}}],
    }))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY}, directory / "duet.log")
    yield server
    server.stop()


def _paced(body: dict[str, Any]) -> Reply:
    """Every stage takes ~0.2 s, in 10 pieces: a hang-up at a random moment lands anywhere in a run."""
    if body.get("model") == REASONER:
        return Reply(reasoning=[f"step {i} " for i in range(10)], delay_between=0.02)
    return Reply(content=[f"word{i} " for i in range(10)], delay_between=0.02)


def test_hundreds_of_hang_ups_at_random_points_log_no_errors(abort_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    duet = abort_duet
    duet.wait_idle()
    upstream.set_default(_paced)
    log_start = duet.log.stat().st_size
    asyncio.run(hang_ups(duet.port, ABORTS, AT_ONCE, seed=7, api_key=API_KEY))
    assert wait_for(lambda: all(r.ended.is_set() for r in upstream.requests), 10)
    assert duet.wait_idle(10)["in_flight"] == 0
    # A finished request afterwards: the server is healthy, and anything left to log has been logged.
    upstream.set_default(lambda body: _paced(body) if body.get("model") == REASONER else Reply(content=["fine"]))
    reply = httpx.post(f"{duet.base_url}/v1/chat/completions", json={"model": "duet", "messages": [{"role": "user", "content": "hi"}]},
                       headers={"Authorization": f"Bearer {API_KEY}", "X-Request-ID": "after-the-hang-ups"}, timeout=30)
    assert reply.status_code == 200, reply.text
    eventually(lambda: "[request after-the-hang-ups]" in duet.log.read_text(), "the last request's log line")  # logged at its end
    with duet.log.open() as log:
        log.seek(log_start)
        new = log.read()
    assert alarming_lines(new) == [], new[-5000:]
    assert len(upstream.requests) > ABORTS / 3  # most hang-ups did land inside a run


def test_a_run_whose_client_already_left_leases_no_team_and_calls_no_model(upstream: ScriptedUpstream) -> None:
    """The HTTP edge cancels a request's token as soon as its client hangs up; a run that has not
    started yet then builds nothing and runs nothing."""
    settings = PipelineSettings(
        reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
        answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER),
    )
    leased: list[TeamSlot] = []

    class LeaseRecordingFactory(TeamFactory):
        def __call__(self) -> TeamSlot:
            leased.append(super().__call__())
            return leased[-1]

    async def main() -> list[Any]:
        duet = Duet(LeaseRecordingFactory.from_settings(settings))
        async with duet:
            token = CancellationToken()
            token.cancel()  # the client hung up before the run started
            events = [event async for event in duet.stream([{"role": "user", "content": "hi"}], cancellation_token=token)]
            # The same pipeline still serves a client that stays.
            assert (await duet.run([{"role": "user", "content": "hi"}])).content.startswith("echo")
            return events

    events = asyncio.run(main())
    assert len(events) == 1 and isinstance(events[0], Failed)
    assert len(leased) == 1  # only the run that went ahead leased a team
    assert [r.model for r in upstream.requests] == [REASONER, ANSWER]
