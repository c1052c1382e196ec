"""Every replayed model-server dialect (tests/replays/) in both roles, through ``duet serve`` on 127.0.0.1.

Each dialect is the answer model behind a well-behaved reasoner (``a-<d>``), the reasoner in front of
a well-behaved answer model (``r-<d>``), and the answer model alone (``o-<d>``, for usage and errors):
on Chat Completions, Responses and Messages, streamed and not, a text turn (text intact; reasoning
complete and only in the reasoning) and a client-tool round trip (the upstream gets back exactly the
ids and fields it issued, or it refuses, as its server does). The checks are the work order's
(:mod:`tests.replays.try_duet`): one home for what "works with this server" means.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml

from tests.conftest import DuetServer
from tests.replays import DIALECTS, ReplayUpstream, Scenario
from tests.replays.dialect import Failure
from tests.replays.try_duet import PROTOCOLS, answer_model, chat, config, first_turn, follow_up, round_trip, text_turn, usage_check

ALL = sorted(DIALECTS)
# Magistral's content is a list of chunks where the SDK's model types a string: it warns, and parses.
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayUpstream]:
    with ReplayUpstream(pace=0.0002) as server:
        yield server


@pytest.fixture(scope="module")
def served(upstream: ReplayUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DuetServer, Path]]:
    directory = tmp_path_factory.mktemp("dialects")
    path = directory / "duet.yaml"
    path.write_text(yaml.safe_dump(config(upstream)))
    server = DuetServer(["--config", str(path)], {"DUET_API_KEYS": ""}, directory / "duet.log")
    yield server, path
    server.stop()


@pytest.fixture
def duet(served: tuple[DuetServer, Path], upstream: ReplayUpstream) -> str:
    upstream.reset()
    return served[0].base_url


@pytest.mark.parametrize("role", ["a", "r"], ids=["answer", "reasoner"])
@pytest.mark.parametrize("name", ALL)
def test_text_and_round_trip(duet: str, upstream: ReplayUpstream, name: str, role: str) -> None:
    """The work order's two checks on each protocol, streamed and not (the six conversations at once);
    a problem is a line of what went wrong, the upstream's refusals included."""

    def conversation(protocol: str, stream: bool) -> list[str]:
        problems = text_turn(duet, f"{role}-{name}", role, protocol, stream)
        problems += round_trip(upstream, duet, f"{role}-{name}", protocol, stream)
        return [f"{protocol} {'stream' if stream else 'whole'}: {problem}" for problem in problems]

    with ThreadPoolExecutor(6) as pool:
        found = pool.map(lambda case: conversation(*case), [(p, s) for p in PROTOCOLS for s in (False, True)], timeout=120)
        assert [problem for problems in found for problem in problems] == []


@pytest.mark.parametrize("name", [name for name in ALL if DIALECTS[name].default_models[0] != answer_model(name)])
def test_plain_model_round_trip(duet: str, upstream: ReplayUpstream, name: str) -> None:
    """The dialect's plain (first, non-thinking) model: its tool round trip too."""
    assert round_trip(upstream, duet, f"p-{name}", "chat", True) == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", ALL)
def test_usage_where_each_server_puts_it(duet: str, name: str, stream: bool) -> None:
    """Completion tokens as the upstream counted them, on a text turn and on a tool-result turn
    (``usage``, Groq's ``x_groq.usage``, Moonshot's ``choices[0].usage``, the finish chunk, a trailing one)."""
    assert usage_check(duet, name, stream) == []


def expected_status(name: str, kind: str) -> tuple[int, str | None]:
    """Duet's status (and ``code``, where it is Duet's own) for the dialect's failure of this kind."""
    dialect = DIALECTS[name]
    if kind == "model_not_found":
        return (200, None) if dialect.ignores_model else (502, "upstream_model_not_found")
    upstream_status = dialect.error(Failure(kind), answer_model(name)).status  # type: ignore[arg-type]
    if upstream_status == 503:
        return 503, "upstream_overloaded"
    return {429: (429, None), 400: (400, None)}.get(upstream_status, (502, "upstream_error"))


@pytest.mark.parametrize("kind", ["rate_limit", "bad_request", "server_error", "model_not_found"])
@pytest.mark.parametrize("name", ALL)
def test_errors_before_the_stream(duet: str, upstream: ReplayUpstream, name: str, kind: str) -> None:
    """An upstream's error answer, in its own shape (an object, Gemini's array, a flat object), becomes
    the documented status with the upstream's message in words, never a Python repr; a 429 or a busy
    503 passes its Retry-After on."""
    if kind == "model_not_found":
        upstream.unserve(name, answer_model(name))
    else:
        upstream.script(name, Scenario.error(kind))  # type: ignore[arg-type]
    for stream in (False, True):
        body = {"model": f"o-{name}", "messages": [{"role": "user", "content": "Weather?"}], "stream": stream}
        if kind != "model_not_found":
            upstream.script(name, Scenario.error(kind))  # type: ignore[arg-type]
        response = httpx.post(duet + "/v1/chat/completions", json=body, timeout=30)
        status, code = expected_status(name, kind)
        assert response.status_code == status, response.text
        if status == 200:
            continue
        error = response.json()["error"]
        assert code is None or error["code"] == code, error
        assert "[{" not in error["message"] and "{'" not in error["message"], error["message"]
        sent = upstream.requests[-1].refusal
        retry_after = sent.headers.get("Retry-After") if sent is not None else None
        if status in (429, 503) and retry_after:
            assert response.headers.get("retry-after") == retry_after
    upstream.reset()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", ALL)
def test_failure_mid_stream(duet: str, upstream: ReplayUpstream, name: str, stream: bool) -> None:
    """A failure after the stream began (an error event, OpenRouter's error chunk that still has
    ``choices``, Zhipu's ``network_error`` finish, a dropped body): an error, never a 200 that ends
    with ``finish_reason: "stop"``; streamed, one error event after what was sent."""
    upstream.script(name, Scenario.mid_stream(after=2))
    body = {"model": f"o-{name}", "messages": [{"role": "user", "content": "Weather?"}], "stream": stream}
    response = httpx.post(duet + "/v1/chat/completions", json=body, timeout=30)
    if response.status_code == 502:  # failed before anything was sent (a stream holds its status back until its first event)
        assert "error" in response.json()
        return
    assert stream and response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert "error" in events[-1], events[-1]
    assert all(choice.get("finish_reason") in (None,) for event in events[:-1] for choice in event.get("choices", []))


RESTARTED = ["mistral", "gemini", "moonshot", "openrouter", "deepseek"]
"""The servers that refuse a follow-up without what they issued (ids, signatures, reasoning)."""


def test_round_trip_survives_a_restart(served: tuple[DuetServer, Path], upstream: ReplayUpstream) -> None:
    """What the upstream must get back (its ids, Gemini's signature, the reasoning) is kept with the
    round in the store: a follow-up that reaches another process (a restart here) still carries it."""
    server, path = served
    upstream.reset()
    rounds = {}
    for name in RESTARTED:
        history = first_turn("chat", "Weather in Paris? [call a tool]")
        said = chat(server.base_url, f"a-{name}", True, history)
        assert said[2] is not None
        rounds[name] = follow_up("chat", history, said)
    other = DuetServer(["--config", str(path)], {"DUET_API_KEYS": ""}, server.log.parent / "other.log")
    try:
        mark = len(upstream.requests)
        answers = {name: chat(other.base_url, f"a-{name}", True, messages)[0] for name, messages in rounds.items()}
    finally:
        other.stop()
    assert [f"{r.dialect}: {r.refusal.body!r}" for r in upstream.requests[mark:] if r.refusal] == []
    assert all(text.endswith("18 °C.") for text in answers.values()), answers


def test_probe_fails_for_a_model_the_upstream_does_not_list(upstream: ReplayUpstream, tmp_path: Path) -> None:
    """``duet check --probe`` (the readiness probe's check) fails for a model missing from ``GET /models``,
    and passes for Gemini's ``models/<name>`` listing."""
    import subprocess
    import sys

    def check(dialect: str, model: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"{dialect}.yaml"
        section = {"base_url": upstream.base_url(dialect), "model": model, "max_retries": 0}
        path.write_text(yaml.safe_dump({"pipelines": [{"name": "p", "answer": section}]}))
        duet = str(Path(sys.executable).parent / "duet")
        env = {"PATH": "/usr/bin:/bin", "DUET_STATE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
        return subprocess.run([duet, "check", "--probe", "--config", str(path)], capture_output=True, text=True, env=env,
                              timeout=60)

    upstream.reset()
    assert check("gemini", "gemini-2.5-flash").returncode == 0
    missing = check("ollama", "qwen3:32b")
    assert missing.returncode != 0 and "qwen3:32b" in missing.stdout + missing.stderr


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_mistral_conversation_goes_on_after_its_tool_round(duet: str, upstream: ReplayUpstream, stream: bool) -> None:
    """Mistral checks every call id of the history, not only the latest round's: a user turn after a
    tool round (the round's ids no longer restored), and a history whose calls another model made
    (ids Mistral never issued), reach it with ids of its shape, each call's result under its call's."""
    history = first_turn("chat", "Weather in Paris? [call a tool]")
    said = chat(duet, "a-mistral", stream, history)
    assert said[2] is not None
    history = follow_up("chat", history, said)
    answered = chat(duet, "a-mistral", stream, history)
    history += [{"role": "assistant", "content": answered[0]}, {"role": "user", "content": "And in Rome?"}]
    foreign = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "toolu_01A09q90qw90lq917835lq9", "type": "function",
                                                                     "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9", "content": "2 °C"},
               {"role": "assistant", "content": "2 °C in Oslo."}, {"role": "user", "content": "And in Rome?"}]
    mark = len(upstream.requests)
    texts = [chat(duet, "a-mistral", stream, conversation)[0] for conversation in (history, foreign)]
    assert [f"{r.dialect}: {r.refusal.body!r}" for r in upstream.requests[mark:] if r.refusal] == []
    assert all(texts), texts
