"""Metrics, traces and request logs, over real HTTP: ``/metrics`` scraped after streamed, collected,
tool and failed requests; ``traceparent`` from the client to the upstream and spans to a real OTLP/HTTP
receiver; ``X-Request-ID``; JSON log lines; two workers' metrics added up; who may read ``/metrics``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from duet.workbenches import model_safe_name
from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, sse_events, tool
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from tests.http.test_service_tools import NOTIFY, QUESTION, answer_from_results, follow_up, mixed_round
from tests.http.test_workers import pinned_clients

UPSTREAM_SECRET = "upstream-secret-7f3a"
CLIENT_TRACE = "0af7651916cd43dd8440eb0000000001"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
USER = [{"role": "user", "content": "Hi"}]


def config(upstream: ScriptedUpstream, directory: Path, **options: Any) -> Path:
    reasoner = {"base_url": upstream.base_url, "model": REASONER}
    answer = {"base_url": upstream.base_url, "model": ANSWER, "api_key_env": "UPSTREAM_KEY"}
    path = directory / "duet.yaml"
    path.write_text(yaml.safe_dump({"ping_interval": 0.3, **options, "pipelines": [
        {"name": "duet", "reasoner": reasoner, "answer": answer},
        {"name": "duet-services", "reasoner": reasoner, "answer": answer,
         "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}},
    ]}))
    return path


def start(upstream: ScriptedUpstream, directory: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = (),
          **options: Any) -> DuetServer:
    return DuetServer(["--config", str(config(upstream, directory, **options)), *args],
                      {"DUET_API_KEYS": API_KEY, "UPSTREAM_KEY": UPSTREAM_SECRET, **(env or {})}, directory / "duet.log")


class Scrape:
    """One ``/metrics`` answer, parsed by prometheus-client's own parser."""

    def __init__(self, text: str) -> None:
        self.samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples named ``name`` whose labels include ``labels`` (0 when none)."""
        return sum(s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def label_values(self, name: str, label: str) -> set[str]:
        return {s.labels[label] for s in self.samples if s.name == name and label in s.labels}


def scrape(server: DuetServer, headers: dict[str, str] | None = None) -> Scrape:
    response = httpx.get(f"{server.base_url}/metrics", headers=server.key_header if headers is None else headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


def log_lines(server: DuetServer) -> list[str]:
    return server.log.read_text().splitlines()


def wait_for_log(server: DuetServer, needle: str, timeout: float = 5) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log_lines(server):
            if needle in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no log line with {needle!r}:\n{server.log.read_text()}")


@pytest.fixture(scope="module")
def watched(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """JSON log lines, keys required, traces off."""
    server = start(upstream, tmp_path_factory.mktemp("watched"), {"DUET_LOG_FORMAT": "json"})
    yield server
    server.stop()


@pytest.fixture
def client(watched: DuetServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=watched.base_url, headers=watched.key_header, timeout=30) as http:
        yield http


def request_line(server: DuetServer, request_id: str) -> dict[str, Any]:
    """The request's own JSON line (``message`` "request")."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in log_lines(server):
            entry = json.loads(line)
            if entry.get("message") == "request" and entry.get("request_id") == request_id:
                return entry
        time.sleep(0.05)
    raise AssertionError(f"no request line for {request_id}:\n{server.log.read_text()}")


# -- metrics -----------------------------------------------------------------------------------------


def test_a_streamed_and_a_collected_request_are_counted(watched: DuetServer, client: httpx.Client, upstream: ScriptedUpstream) -> None:
    before = scrape(watched)
    upstream.script(REASONER, Reply(reasoning=["Think", "ing."], usage=(11, 7)))
    upstream.script(ANSWER, Reply(content=["Hel", "lo"], usage=(23, 5)))
    streamed = client.post("/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER})
    assert streamed.status_code == 200 and sse_events(streamed.content)[-1] == "[DONE]"
    upstream.script(REASONER, Reply(reasoning=["Hm."], usage=(13, 2)))
    upstream.script(ANSWER, Reply(content=["Yes"], usage=(29, 1)))
    assert client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 200
    after = scrape(watched)

    def grew(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    ok = {"pipeline": "duet", "protocol": "chat.completions"}
    assert grew("duet_requests_total", **ok, status="200") == 2
    assert grew("duet_request_duration_seconds_count", **ok) == 2
    assert grew("duet_time_to_first_token_seconds_count", **ok) == 2
    assert grew("duet_overhead_seconds_count", **ok) == 2
    assert 0 < grew("duet_overhead_seconds_sum", **ok) < grew("duet_request_duration_seconds_sum", **ok)
    assert grew("duet_tokens_total", pipeline="duet", stage="reasoner", direction="input") == 24
    assert grew("duet_tokens_total", pipeline="duet", stage="reasoner", direction="output") == 9
    assert grew("duet_tokens_total", pipeline="duet", stage="answer", direction="input") == 52
    assert grew("duet_tokens_total", pipeline="duet", stage="answer", direction="output") == 6
    for stage in ("reasoner", "answer"):
        assert grew("duet_upstream_duration_seconds_count", pipeline="duet", stage=stage) == 2
        assert grew("duet_upstream_time_to_first_token_seconds_count", pipeline="duet", stage=stage) == 2
    assert after.value("duet_requests_in_flight") == 0


def test_tool_rounds_count_their_tools_and_store_calls(watched: DuetServer, client: httpx.Client, upstream: ScriptedUpstream) -> None:
    before = scrape(watched)
    mixed_round(upstream)
    first = client.post("/v1/chat/completions", json={"model": "duet-services", "messages": QUESTION, "tools": [NOTIFY]}).json()
    upstream.script(ANSWER, answer_from_results)
    second = client.post("/v1/chat/completions", json={"model": "duet-services", "messages": follow_up(first), "tools": [NOTIFY]})
    assert second.status_code == 200
    after = scrape(watched)

    def grew(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert grew("duet_tool_calls_total", kind="service", tool="lookup_customer", outcome="ok") == 1
    assert grew("duet_tool_calls_total", kind="client", tool="notify_user", outcome="requested") == 1
    assert grew("duet_tool_duration_seconds_count", tool="lookup_customer") == 1
    assert grew("duet_store_operations_total", operation="put", outcome="ok") == 1
    assert grew("duet_store_operations_total", operation="get", outcome="ok") == 1
    assert grew("duet_requests_total", pipeline="duet-services", protocol="chat.completions", status="200") == 2


def test_failures_are_counted_by_status_and_upstream_code(watched: DuetServer, client: httpx.Client, upstream: ScriptedUpstream) -> None:
    before = scrape(watched)
    upstream.script(ANSWER, Reply(status=400, error_message="context too long"))
    assert client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 400
    upstream.script(REASONER, Reply(fault="disconnect", reasoning=["a", "b", "c"], fault_after=1))
    # A reasoner that is down costs the reasoning, not the answer (issue 26); its failure is counted all the same.
    assert client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 200
    upstream.script(ANSWER, Reply(fault="disconnect", content=["a", "b", "c"], fault_after=1))
    assert client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 502
    assert client.post("/v1/chat/completions", json={"model": "no such model", "messages": USER}).status_code == 404
    assert client.post("/v1/chat/completions", json={"model": "duet", "messages": "not a list"}).status_code == 400
    after = scrape(watched)

    def grew(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert grew("duet_upstream_errors_total", pipeline="duet", stage="answer", code="400") == 1
    assert grew("duet_upstream_errors_total", pipeline="duet", stage="reasoner", code="disconnected") == 1
    assert grew("duet_upstream_errors_total", pipeline="duet", stage="answer", code="disconnected") == 1
    assert grew("duet_requests_total", pipeline="duet", protocol="chat.completions", status="400") == 1
    assert grew("duet_requests_total", pipeline="duet", protocol="chat.completions", status="502") == 1
    # A model name the service does not serve is the client's text: it never becomes a label.
    assert grew("duet_requests_total", pipeline="", protocol="chat.completions", status="404") == 1
    assert grew("duet_requests_total", pipeline="", protocol="chat.completions", status="400") == 1
    assert "no such model" not in httpx.get(f"{watched.base_url}/metrics", headers=watched.key_header).text


def test_metrics_show_a_series_only_for_what_happened(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """A request refused before a pipeline ran has a duration, no first token and no overhead; a model
    call that failed has a duration and an error, no tokens counted by the upstream and no first token."""
    server = start(upstream, tmp_path)
    try:
        with httpx.Client(base_url=server.base_url, headers=server.key_header, timeout=30) as client:
            assert client.post("/v1/chat/completions", json={"model": "no such model", "messages": USER}).status_code == 404
            upstream.script(ANSWER, Reply(status=400, error_message="context too long"))
            assert client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 400
        seen = scrape(server)
        assert seen.value("duet_request_duration_seconds_count", pipeline="") == 1
        assert seen.value("duet_upstream_duration_seconds_count", stage="answer") == 1
        assert not [sample for sample in seen.samples if sample.labels.get("pipeline") == ""
                    and sample.name in ("duet_overhead_seconds_count", "duet_time_to_first_token_seconds_count")]
        assert not [sample for sample in seen.samples if sample.labels.get("stage") == "answer" and (
            sample.name == "duet_upstream_time_to_first_token_seconds_count"
            or (sample.name == "duet_tokens_total" and sample.labels.get("source") == "upstream"))]
    finally:
        server.stop()


def test_tool_names_chosen_by_clients_are_bounded(watched: DuetServer, client: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Client tool names are labels only while they are plain and few (64 per worker); the rest are ``other``."""
    odd = "weird name with spaces"
    upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall(model_safe_name(odd), "{}")]))
    response = client.post("/v1/chat/completions", json={"model": "duet", "messages": USER, "tools": [tool(odd)]})
    assert response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == odd
    after = scrape(watched)
    assert odd not in after.label_values("duet_tool_calls_total", "tool")
    assert after.value("duet_tool_calls_total", kind="client", tool="other", outcome="requested") >= 1


def test_metrics_need_a_key(watched: DuetServer) -> None:
    assert httpx.get(f"{watched.base_url}/metrics").status_code == 401
    wrong = httpx.get(f"{watched.base_url}/metrics", headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    scrape(watched)


def test_metrics_can_be_opened_or_switched_off(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    server = start(upstream, tmp_path / "open", {"DUET_METRICS_OPEN": "true"})
    try:
        scrape(server, headers={})
        assert httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 401
    finally:
        server.stop()
    (tmp_path / "off").mkdir()
    server = start(upstream, tmp_path / "off", metrics=False)
    try:
        assert httpx.get(f"{server.base_url}/metrics", headers=server.key_header).status_code == 404
    finally:
        server.stop()


# -- request ids and log lines ----------------------------------------------------------------------


def test_a_request_id_goes_round_trip_and_into_every_line_of_its_request(watched: DuetServer, client: httpx.Client,
                                                                         upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(status=401, error_message="it broke", echo_key=True))
    response = client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}, headers={"X-Request-ID": "trace-me.42"})
    assert response.status_code == 502 and response.headers["x-request-id"] == "trace-me.42"
    entry = request_line(watched, "trace-me.42")
    assert entry["status"] == 502 and entry["pipeline"] == "duet" and entry["protocol"] == "chat.completions"
    assert entry["path"] == "/v1/chat/completions" and entry["stream"] is False
    assert entry["answer"]["errors"] == ["401"] and entry["reasoner"]["calls"] == 1
    # The agent's warning about the failure is a line of the same request.
    warning = next(json.loads(line) for line in log_lines(watched) if "answerer failed" in line and "it broke" in line)
    assert warning["request_id"] == "trace-me.42" and warning["level"] == "WARNING"
    assert UPSTREAM_SECRET not in watched.log.read_text()  # the upstream echoed Duet's key: masked


@pytest.mark.parametrize("given", ["", "x" * 129, "has space", "semi;colon", "ünï"])
def test_an_unusable_request_id_is_replaced(client: httpx.Client, given: str) -> None:
    response = client.get("/v1/models", headers={"X-Request-ID": given.encode("utf-8")})
    assert response.status_code == 200
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"])


def test_each_request_gets_a_new_id(client: httpx.Client) -> None:
    ids = {client.get("/v1/models").headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3


def test_the_request_line_lists_stages_tokens_and_tools(watched: DuetServer, client: httpx.Client, upstream: ScriptedUpstream) -> None:
    mixed_round(upstream)
    response = client.post("/v1/chat/completions", json={"model": "duet-services", "messages": QUESTION, "tools": [NOTIFY],
                                                         "stream": True}, headers={"X-Request-ID": "mixed-1"})
    assert response.status_code == 200
    entry = request_line(watched, "mixed-1")
    assert entry["stream"] is True and entry["status"] == 200 and entry["pipeline"] == "duet-services"
    assert entry["reasoner"]["calls"] == 1 and entry["answer"]["calls"] == 1
    assert entry["reasoner"]["tokens_out"] == 1 and entry["answer"]["tokens_in"] > 0
    assert entry["duration_ms"] >= entry["reasoner"]["ms"] + entry["answer"]["ms"]
    assert 0 <= entry["overhead_ms"] < entry["duration_ms"] and entry["ttft_ms"] <= entry["duration_ms"]
    calls = entry["calls"]
    assert {"tool": "lookup_customer", "kind": "service", "outcome": "ok"}.items() <= calls[0].items()
    assert {"tool": "notify_user", "kind": "client", "outcome": "requested"} in calls
    assert {"store": "put", "outcome": "ok"}.items() <= calls[-1].items()
    assert "worker" not in entry  # one process


def test_probes_are_not_logged(watched: DuetServer) -> None:
    httpx.get(f"{watched.base_url}/health", headers={"X-Request-ID": "probe-1"})
    httpx.get(f"{watched.base_url}/health/ready", headers={"X-Request-ID": "probe-2"})
    httpx.get(f"{watched.base_url}/v1/models", headers={**watched.key_header, "X-Request-ID": "after-probes"})
    request_line(watched, "after-probes")
    assert "probe-1" not in watched.log.read_text() and "probe-2" not in watched.log.read_text()


def test_every_line_is_json(watched: DuetServer) -> None:
    for line in log_lines(watched):
        entry = json.loads(line)
        assert {"time", "level", "logger", "message"} <= entry.keys()


def test_text_lines_name_the_request(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = start(upstream, tmp_path)
    try:
        httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER},
                   headers={**server.key_header, "X-Request-ID": "text-1"})
        line = wait_for_log(server, "[request text-1]")
        assert "INFO duet.requests" in line and "POST /v1/chat/completions status=200 pipeline=duet" in line
        assert 'reasoner={"calls":1' in line
    finally:
        server.stop()


# -- traces ------------------------------------------------------------------------------------------


class OTLPReceiver:
    """An OTLP/HTTP trace receiver on loopback: decodes each export with opentelemetry-proto."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                body = self.rfile.read(int(self.headers["content-length"]))
                export = ExportTraceServiceRequest()
                export.ParseFromString(body)
                receiver.paths.append(self.path)
                for resource_spans in export.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend(scope_spans.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def trace(self, trace_id: str, timeout: float = 10) -> dict[str, Any]:
        """The spans of ``trace_id`` by name, once its request span (the last to end) has arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = {span.name: span for span in list(self.spans) if span.trace_id.hex() == trace_id}
            if "POST /v1/chat/completions" in spans:
                return spans
            time.sleep(0.05)
        raise AssertionError(f"no request span of trace {trace_id}: {[span.name for span in self.spans]}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        values[attribute.key] = [v.string_value for v in value.array_value.values] if kind == "array_value" else getattr(value, kind)
    return values


@pytest.fixture(scope="module")
def otlp() -> Iterator[OTLPReceiver]:
    receiver = OTLPReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def traced(upstream: ScriptedUpstream, otlp: OTLPReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    server = start(upstream, tmp_path_factory.mktemp("traced"), {
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url, "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "duet-under-test"})
    yield server
    server.stop()


def test_traceparent_reaches_the_upstreams_and_spans_reach_the_collector(traced: DuetServer, otlp: OTLPReceiver,
                                                                         upstream: ScriptedUpstream) -> None:
    mixed_round(upstream)
    sdk = openai.OpenAI(base_url=f"{traced.base_url}/v1", api_key=API_KEY, max_retries=0)
    sdk.chat.completions.create(model="duet-services", messages=QUESTION, tools=[NOTIFY],  # type: ignore[arg-type, list-item]
                                extra_headers={"traceparent": TRACEPARENT})
    # The upstream calls carry the trace of the client, each under its own model-call span.
    sent = [r.headers["traceparent"] for r in upstream.requests]
    assert len(sent) == 2 and all(value.split("-")[1] == CLIENT_TRACE for value in sent)
    model_span_ids = {value.split("-")[2] for value in sent}
    assert CLIENT_SPAN not in model_span_ids and len(model_span_ids) == 2

    by_name = otlp.trace(CLIENT_TRACE)
    request = by_name["POST /v1/chat/completions"]
    assert request.parent_span_id.hex() == CLIENT_SPAN and request.kind == request.SPAN_KIND_SERVER
    assert attributes(request)["http.response.status_code"] == 200 and attributes(request)["duet.pipeline"] == "duet-services"
    reasoner, answer = by_name[f"chat {REASONER}"], by_name[f"chat {ANSWER}"]
    assert {reasoner.span_id.hex(), answer.span_id.hex()} == model_span_ids
    for span in (reasoner, answer):
        assert span.parent_span_id == request.span_id and span.kind == span.SPAN_KIND_CLIENT
    answer_attributes = attributes(answer)
    assert answer_attributes["gen_ai.request.model"] == ANSWER and answer_attributes["gen_ai.operation.name"] == "chat"
    assert answer_attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert answer_attributes["gen_ai.usage.input_tokens"] > 0 and answer_attributes["gen_ai.usage.output_tokens"] == 3
    assert attributes(reasoner)["duet.stage"] == "reasoner"
    tool_span = by_name["execute_tool lookup_customer"]
    assert tool_span.parent_span_id == request.span_id and attributes(tool_span)["gen_ai.tool.name"] == "lookup_customer"
    assert otlp.paths[0] == "/v1/traces"


def test_a_failed_model_call_is_an_error_span(traced: DuetServer, otlp: OTLPReceiver, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(status=401, error_message="no such key"))
    trace_id = "0af7651916cd43dd8440eb0000000002"
    response = httpx.post(f"{traced.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER},
                          headers={**traced.key_header, "traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}, timeout=30)
    assert response.status_code == 502
    failed = otlp.trace(trace_id)[f"chat {ANSWER}"]
    assert failed.status.code == failed.status.STATUS_CODE_ERROR and attributes(failed)["error.type"] == "401"


def test_the_request_span_counts_every_stages_tokens_estimates_included(traced: DuetServer, otlp: OTLPReceiver,
                                                                        upstream: ScriptedUpstream) -> None:
    # A draft answer after the thinking: Duet closes the reasoner's call there, and its usage never comes.
    upstream.script(REASONER, Reply(reasoning=["Think ", "it ", "through."], content=["Draft ", "nobody ", "reads."],
                                    delay_between=0.05))
    upstream.script(ANSWER, Reply(content=["Done."], usage=(30, 2)))
    trace_id = "0af7651916cd43dd8440eb0000000013"
    response = httpx.post(f"{traced.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER},
                          headers={**traced.key_header, "traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}, timeout=30)
    assert response.status_code == 200, response.text
    request = otlp.trace(trace_id)["POST /v1/chat/completions"]
    counted = attributes(request)
    assert counted["duet.reasoner.usage.source"] == "estimate" and counted["duet.reasoner.usage.output_tokens"] > 0
    assert (counted["duet.answer.usage.source"], counted["duet.answer.usage.input_tokens"]) == ("upstream", 30)
    [event] = [event for event in request.events if event.name == "duet.usage"]
    assert attributes(event)["duet.stage"] == "reasoner" and attributes(event)["duet.usage.source"] == "estimate"
    assert attributes(event)["gen_ai.usage.output_tokens"] == counted["duet.reasoner.usage.output_tokens"]


def test_without_traces_the_clients_traceparent_passes_through(watched: DuetServer, client: httpx.Client,
                                                               upstream: ScriptedUpstream) -> None:
    client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}, headers={"traceparent": TRACEPARENT})
    assert [r.headers.get("traceparent") for r in upstream.requests] == [TRACEPARENT, TRACEPARENT]
    client.post("/v1/chat/completions", json={"model": "duet", "messages": USER}, headers={"traceparent": "garbage"})
    assert all("traceparent" not in r.headers for r in upstream.requests[2:])


def test_an_unsupported_otlp_protocol_stops_the_start(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"):
        start(upstream, tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


# -- several workers ---------------------------------------------------------------------------------


def test_two_workers_metrics_are_added_up_and_lines_name_the_worker(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    server = start(upstream, tmp_path, {"DUET_LOG_FORMAT": "json", "TMPDIR": str(temp), "DUET_API_KEYS": ""}, ("--workers", "2"))
    try:
        clients = pinned_clients(server)
        assert len(clients) == 2
        for number, (pid, http) in enumerate(clients.items()):
            for index in range(number + 2):  # 2 on one worker, 3 on the other
                response = http.post("/v1/chat/completions", json={"model": "duet", "messages": USER},
                                     headers={**server.key_header, "X-Request-ID": f"w{pid}-{index}"})
                assert response.status_code == 200
        for _pid, http in clients.items():  # every worker answers with the sum of both
            body = http.get("/metrics", headers=server.key_header)
            assert Scrape(body.text).value("duet_requests_total", pipeline="duet", status="200") == 5
            assert Scrape(body.text).value("duet_tokens_total", stage="answer", direction="output") == 10
            http.close()
        assert len(list(temp.iterdir())) == 1  # the shared directory, made by the parent
        for pid in clients:
            assert request_line(server, f"w{pid}-0")["worker"] == pid
    finally:
        server.stop()
    assert list(temp.iterdir()) == []  # and removed by it


# -- off the happy path ------------------------------------------------------------------------------


def test_a_client_that_hangs_up_mid_stream_is_counted_once_and_leaves_nothing_in_flight(
        watched: DuetServer, upstream: ScriptedUpstream) -> None:
    before = scrape(watched)
    upstream.script(ANSWER, Reply(content=["word "] * 200, delay_between=0.02))
    with httpx.Client(base_url=watched.base_url, headers={**watched.key_header, "X-Request-ID": "leaver-1"}, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}) as response:
            for chunk in response.iter_bytes():
                if b"word" in chunk:
                    break  # hang up mid-answer
    entry = request_line(watched, "leaver-1")
    assert entry["status"] == 200 and entry["answer"]["calls"] == 1 and "errors" not in entry["answer"]
    after = scrape(watched)
    assert after.value("duet_requests_in_flight") == 0
    assert after.value("duet_upstream_errors_total") == before.value("duet_upstream_errors_total")  # a cancel is no upstream error
    assert after.value("duet_upstream_duration_seconds_count", stage="answer") == before.value(
        "duet_upstream_duration_seconds_count", stage="answer") + 1


def test_traces_whose_collector_is_down_cost_the_requests_nothing(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    closed = OTLPReceiver()
    url = closed.url
    closed.close()  # nothing listens there any more
    server = start(upstream, tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "50",
                                        "OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
    try:
        for _ in range(3):
            response = httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER},
                                  headers=server.key_header, timeout=10)
            assert response.status_code == 200
        time.sleep(0.5)  # the subject: exports are tried (and fail) meanwhile, then the server stops
    finally:
        started = time.monotonic()
        server.stop()
    # uvicorn ends by raising the SIGTERM again once it has shut down; what matters is that it did, in time.
    assert server.process.returncode in (0, -signal.SIGTERM) and time.monotonic() - started < 10


def test_spans_still_waiting_are_sent_when_the_server_stops(upstream: ScriptedUpstream, otlp: OTLPReceiver, tmp_path: Path) -> None:
    server = start(upstream, tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url, "OTEL_BSP_SCHEDULE_DELAY": "600000"})
    trace_id = "0af7651916cd43dd8440eb0000000003"
    try:
        response = httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "duet", "messages": USER},
                              headers={**server.key_header, "traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}, timeout=10)
        assert response.status_code == 200
        wait_for_log(server, "POST /v1/chat/completions status=200")  # the request and its spans have ended
        assert not [span for span in otlp.spans if span.trace_id.hex() == trace_id]  # batched, not sent yet
    finally:
        server.stop()
    assert {f"chat {REASONER}", f"chat {ANSWER}"} <= otlp.trace(trace_id, timeout=2).keys()


def test_a_worker_killed_mid_request_keeps_its_counts_and_leaves_nothing_in_flight(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = start(upstream, tmp_path, {"DUET_API_KEYS": ""}, ("--workers", "2"))
    try:
        clients = pinned_clients(server)
        (victim, doomed), (_survivor, http) = clients.items()
        assert doomed.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).status_code == 200
        upstream.script(ANSWER, Reply(content=["late"], delay=60))
        def hang() -> None:
            with contextlib.suppress(httpx.HTTPError):  # its worker is killed under it
                doomed.post("/v1/chat/completions", json={"model": "duet", "messages": USER})

        hanging = threading.Thread(target=hang, daemon=True)
        hanging.start()
        deadline = time.monotonic() + 10
        while Scrape(http.get("/metrics").text).value("duet_requests_in_flight") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Scrape(http.get("/metrics").text).value("duet_requests_in_flight") == 1
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Scrape(http.get("/metrics").text).value("duet_requests_in_flight") != 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the parent sees the worker gone and drops its gauge
        after = Scrape(http.get("/metrics").text)
        assert after.value("duet_requests_in_flight") == 0
        assert after.value("duet_requests_total", pipeline="duet", status="200") == 1  # the dead worker's request still counts
        http.close()
    finally:
        server.stop()
