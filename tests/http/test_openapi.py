"""``/openapi.json`` (with ``docs`` on) describes every protocol route, and the service keeps to it.

The document is checked against the OpenAPI 3.1 specification (``openapi-spec-validator``); then
schemathesis draws requests from it, valid ones and ones that break it, for every protocol route, and
sends them over real HTTP: never a 5xx, every status and content type the document names, every JSON
answer (200s and errors) valid against its schema, every body that breaks the schema refused with a
4xx. The budget is fixed and the draws deterministic (``derandomize``); ``bench/fuzz.py`` runs the
big campaign.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate

from tests.conftest import API_KEY, DuetServer, pipelines_config
from tests.schema_fuzzing import OPERATIONS, SchemaFuzz
from tests.scripted_upstream import ScriptedUpstream

EXAMPLES = {"POST": 40, "GET": 20}
STREAMED = {"/v1/chat/completions", "/v1/responses", "/v1/messages"}


@pytest.fixture(scope="module")
def docs_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    directory = tmp_path_factory.mktemp("docs-duet")
    config = directory / "duet.yaml"
    config.write_text(yaml.safe_dump(pipelines_config(upstream.base_url)))
    server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY, "UPSTREAM_KEY": "upstream-secret", "DUET_DOCS": "true"},
                        directory / "duet.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def document(docs_duet: DuetServer) -> dict[str, Any]:
    response = httpx.get(f"{docs_duet.base_url}/openapi.json")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)


def test_every_protocol_route_is_described_with_its_bodies_and_errors(document: dict[str, Any]) -> None:
    paths = document["paths"]
    for path, method in OPERATIONS:
        operation = paths[path][method.lower()]
        answer = operation["responses"]["200"]["content"]
        assert "application/json" in answer, path
        assert ("text/event-stream" in answer) == (path in STREAMED), path
        assert {"401", "500"} <= set(operation["responses"]), path
        if method == "POST":
            request = operation["requestBody"]["content"]["application/json"]["schema"]
            assert request["$ref"].startswith("#/components/schemas/"), path
            assert {"400", "404", "413", "415", "429", "502", "503", "504"} <= set(operation["responses"]), path
    schemas = document["components"]["schemas"]
    anthropic_error = paths["/v1/messages"]["post"]["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
    assert schemas[anthropic_error.rpartition("/")[2]]["properties"]["type"]["const"] == "error"
    openai_error = paths["/v1/responses"]["post"]["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
    assert set(schemas[openai_error.rpartition("/")[2]]["properties"]) == {"error"}


def test_without_docs_there_is_no_document(duet: DuetServer) -> None:
    assert httpx.get(f"{duet.base_url}/openapi.json").status_code == 404


@pytest.mark.parametrize("negative", [False, True], ids=["valid", "invalid"])
@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[f"{method} {path}" for path, method in OPERATIONS])
def test_answers_keep_to_the_document(document: dict[str, Any], docs_duet: DuetServer, upstream: ScriptedUpstream, path: str,
                                      method: str, negative: bool) -> None:
    upstream.enforce_openai_rules()
    fuzz = SchemaFuzz(document, docs_duet.base_url, API_KEY)

    @settings(max_examples=EXAMPLES[method], derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])
    @given(data=st.data())
    def fuzz_operation(data: st.DataObject) -> None:
        found = fuzz.send(data, path, method, negative, upstream)
        assert not found, found

    try:
        fuzz_operation()
    finally:
        fuzz.close()
    assert upstream.refused_requests() == []


def test_the_schema_fuzzing_left_no_crash_in_the_log(docs_duet: DuetServer) -> None:
    log = Path(docs_duet.log).read_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-3000:]
