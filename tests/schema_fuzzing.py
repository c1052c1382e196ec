"""Schema-driven fuzzing of Duet's protocol routes with schemathesis, from the ``/openapi.json`` it serves.

Shared by ``tests/http/test_openapi.py`` (a fixed budget) and ``bench/fuzz.py`` (the big campaign).
Requests are drawn from the document, valid ones (half of them naming a served pipeline, so they
reach the models) and ones that break it, and sent over real HTTP; each answer goes through
schemathesis' checks: no 5xx, a documented status and content type, a JSON body valid against its
schema, a schema-breaking body refused with a 4xx. A request Duet sent the (rule-enforcing) scripted
upstream that OpenAI's rules refuse counts as a failure too.
"""

from __future__ import annotations

from typing import Any

import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.scripted_upstream import ScriptedUpstream

OPERATIONS = [
    ("/v1/chat/completions", "POST"),
    ("/v1/responses", "POST"),
    ("/v1/responses/{response_id}", "GET"),
    ("/v1/messages", "POST"),
    ("/v1/messages/count_tokens", "POST"),
    ("/v1/models", "GET"),
]
SERVED = ["duet", "answer-only", "claude-sonnet-4-5"]  # pipelines of tests/conftest.py (the last through model_aliases)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _deeper(body: dict[str, Any], data: st.DataObject) -> None:
    """A valid body made to reach the models: a served pipeline, and (the document leaves a message's
    fields free) one user message; every other field stays as drawn. Still valid for the document."""
    body["model"] = data.draw(st.sampled_from(SERVED), label="model")
    if isinstance(body.get("messages"), list):
        body["messages"] = [{"role": "user", "content": data.draw(st.text(min_size=1, max_size=40), label="text")}]


class SchemaFuzz:
    """Draws, sends and checks requests of one document's operations; one HTTP session for all."""

    def __init__(self, document: dict[str, Any], base_url: str, api_key: str) -> None:
        self.schema = schemathesis.openapi.from_dict(document)
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.session = requests.Session()
        self.statuses: dict[int, int] = {}
        self._stored: str | None = None

    def _stored_response(self) -> str:
        if self._stored is None:
            answer = self.session.post(f"{self.base_url}/v1/responses", json={"model": "duet", "input": "hi"}, headers=self.headers, timeout=30)
            answer.raise_for_status()
            self._stored = answer.json()["id"]
        return self._stored

    def send(self, data: st.DataObject, path: str, method: str, negative: bool, upstream: ScriptedUpstream) -> list[str]:
        """One request of ``method path`` drawn from the document; what is wrong with its answer (empty: nothing)."""
        mode = GenerationMode.NEGATIVE if negative else GenerationMode.POSITIVE
        case = data.draw(self.schema[path][method].as_strategy(generation_mode=mode), label="case")
        if not negative and data.draw(st.booleans(), label="deeper"):
            if isinstance(case.body, dict):
                _deeper(case.body, data)
            elif case.path_parameters and "response_id" in case.path_parameters:  # a response that is stored
                case.path_parameters["response_id"] = self._stored_response()
        calls = len(upstream.requests)
        found: list[str] = []
        checks = [*CHECKS, negative_data_rejection] if negative else CHECKS
        response = case.call(base_url=self.base_url, session=self.session, headers=self.headers)
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        try:
            case.validate_response(response, checks=checks, headers=self.headers,
                                   transport_kwargs={"base_url": self.base_url, "session": self.session, "headers": self.headers})
        except BaseException as exc:  # schemathesis raises its failures as an exception group
            if not hasattr(exc, "exceptions") and not type(exc).__module__.startswith("schemathesis"):
                raise
            found.append(str(exc).strip().splitlines()[2 if len(str(exc).splitlines()) > 2 else 0][:200] + "\n" + str(exc)[:1500])
        found += [f"the upstream refused what Duet sent: {record.refused}" for record in upstream.requests[calls:] if record.refused]
        return found

    def close(self) -> None:
        self.session.close()
