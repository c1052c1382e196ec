"""Property-based fuzzing of every protocol route's request body, over real HTTP against ``duet serve``.

Hypothesis builds hostile bodies for Chat Completions, Responses, Messages and ``count_tokens``
(:mod:`tests.fuzzing`), sends each streamed or not, and checks what any client may rely on: never a
5xx; every refusal in the protocol's error shape, with no model called for it; no HTTP 200 carrying
an error; nothing sent to an upstream that OpenAI's documented rules refuse (the scripted upstream
enforces them here) or that is not strict JSON in UTF-8.

The budget is fixed and the run deterministic (``derandomize``), so a failure reproduces. The big
campaign (thousands of bodies per route, its counts written to ``bench/results/``) is ``bench/fuzz.py``.
"""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import API_KEY, DuetServer
from tests.fuzzing import ROUTES, Route, hostile_body, problems
from tests.scripted_upstream import ScriptedUpstream

EXAMPLES = {"chat": 300, "responses": 300, "messages": 300, "count_tokens": 200}
HEADERS = {"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"}


def send(client: httpx.Client, upstream: ScriptedUpstream, route: Route, raw: bytes, stream: bool) -> None:
    upstream.enforce_openai_rules()
    calls = len(upstream.requests)
    response = client.post(route.path, content=raw, headers=HEADERS)
    event(f"HTTP {response.status_code}{' stream' if stream else ''}")  # --hypothesis-show-statistics
    found = problems(route, response, upstream, calls)
    assert not found, (found, raw[:500])


FUZZ_SETTINGS = dict(derandomize=True, database=None, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", list(ROUTES))
def test_no_body_gets_a_5xx_or_a_200_with_an_error(name: str, duet: DuetServer, upstream: ScriptedUpstream) -> None:
    route = ROUTES[name]

    @settings(max_examples=EXAMPLES[name], **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        raw, stream = data.draw(hostile_body(route), label="body")
        send(client, upstream, route, raw, stream)

    with httpx.Client(base_url=duet.base_url, timeout=30) as client:  # one client: a new one per body costs ~0.1 s
        fuzz()


def test_the_fuzzing_left_no_crash_in_the_log(duet: DuetServer) -> None:
    """Runs after the fuzz tests (file order): nothing they sent was logged as an internal error."""
    log = duet.log.read_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-3000:]
