"""One request watched: what its run reports (a :class:`~duet.agents._observe.RunObserver`), turned
into the process's metrics, the request's spans and its one log line."""

from __future__ import annotations

import asyncio
import logging
import time
from contextvars import ContextVar
from typing import Any, Iterable, Mapping

from autogen_core.models import CreateResult
from opentelemetry.trace import Span, StatusCode, Tracer

from duet.agents import (
    UpstreamConnectionError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnreachable,
    upstream_error_from_openai,
)
from duet.agents import Stage, StoreOutcome, Usage

from duet.api.observability._logs import json_lines, logfmt, write_line
from duet.api.observability._metrics import Metrics, process_metrics
from duet.api.observability._tracing import process_tracer, propagation_headers, start_child_span, start_request_span

MAX_LOGGED_CALLS = 32
"""Tool and store calls a request's log line lists (the rest are counted)."""

_FINISH_REASONS = {"function_calls": "tool_calls"}  # AutoGen's name → the GenAI conventions'


def upstream_error_code(error: BaseException) -> str:
    """A failed model call's ``code`` label: the upstream's HTTP status, or the kind of failure."""
    error = upstream_error_from_openai(error, None) or error  # AutoGen's stock client raises the openai SDK's errors
    if isinstance(error, UpstreamStatusError):
        return str(error.upstream_status) if error.upstream_status else "error_object"
    if isinstance(error, UpstreamTimeout):
        return "timeout"
    if isinstance(error, UpstreamUnreachable):
        return "unreachable"
    if isinstance(error, UpstreamConnectionError):
        return "disconnected"
    if isinstance(error, UpstreamProtocolError):
        return "protocol_error"
    return "other"


class Observability:
    """What an app records requests with: the process's metrics (unless ``metrics`` is off) and its
    tracer (when the ``OTEL_*`` variables turned traces on)."""

    def __init__(self, metrics: bool = True) -> None:
        self.metrics: Metrics | None = process_metrics() if metrics else None
        self.tracer: Tracer | None = process_tracer()
        self.log = logging.getLogger("duet.requests")


class _Stage:
    __slots__ = ("calls", "seconds", "first_token", "input_tokens", "output_tokens", "cached_tokens", "sources", "errors")

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.first_token: float | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.sources: list[str] = []  # where the token figures come from, when not (only) the upstream's count
        self.errors: list[str] = []

    def count(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int, source: str) -> None:
        self.input_tokens += prompt_tokens
        self.output_tokens += completion_tokens
        self.cached_tokens += cached_tokens
        if source != "upstream" and source not in self.sources:
            self.sources.append(source)

    def fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"calls": self.calls, "ms": _ms(self.seconds)}
        if self.first_token is not None:
            fields["ttft_ms"] = _ms(self.first_token)
        fields["tokens_in"], fields["tokens_out"] = self.input_tokens, self.output_tokens
        if self.cached_tokens:
            fields["tokens_cached"] = self.cached_tokens
        if self.sources:
            fields["tokens_source"] = ",".join(self.sources)
        if self.errors:
            fields["errors"] = self.errors
        return fields


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


class RequestObservation:
    """A request from arrival to the end of its response; the :class:`RunObserver` of its run."""

    def __init__(self, hub: Observability, request_id: str, method: str, path: str, protocol: str,
                 trace_parent: Mapping[str, str] | None) -> None:
        self.hub = hub
        self.request_id = request_id
        self.method = method
        self.path = path
        self.protocol = protocol
        self.pipeline = ""  # set once the request names a served pipeline
        self.stream: bool | None = None
        self.started = time.perf_counter()
        self.first_token: float | None = None  # seconds after arrival
        self.stages: dict[str, _Stage] = {}
        self.calls: list[dict[str, Any]] = []  # tool and store calls, for the log line
        self.more_calls = 0
        self._busy = 0  # model or tool calls running now
        self._busy_since = 0.0
        self.waited = 0.0  # seconds at least one of them was running
        self.span: Span | None = None
        # Without traces of its own, Duet passes the client's trace context on to the upstreams unchanged.
        self.upstream_headers: Mapping[str, str] | None = trace_parent
        if hub.tracer is not None:
            self.span = start_request_span(hub.tracer, f"{method} {path}", trace_parent, time.time_ns(), {
                "http.request.method": method, "url.path": path, "duet.request_id": request_id, "duet.protocol": protocol})
            self.upstream_headers = None
        if hub.metrics is not None:
            hub.metrics.in_flight.inc()

    @property
    def trace_id(self) -> str | None:
        """The trace the request is part of (32 hex digits): its span's, or without traces on, the
        client's (whose ``traceparent`` the upstreams get); ``None`` when there is none."""
        if self.span is not None:
            return format(self.span.get_span_context().trace_id, "032x")
        if self.upstream_headers is not None:
            return self.upstream_headers["traceparent"][3:35]
        return None

    # The RunObserver protocol (duet.agents._observe)

    def model_call(self, stage: Stage, model: str) -> "_ModelCall":
        return _ModelCall(self, stage, model)

    def tool_call(self, tool: str) -> "_ToolCall":
        return _ToolCall(self, tool)

    def client_tool_calls(self, tools: Iterable[str]) -> None:
        metrics = self.hub.metrics
        for tool in tools:
            if metrics is not None:
                metrics.child(metrics.tool_calls, "client", metrics.client_tools(tool), "requested").inc()
            self._log_call({"tool": tool[:64], "kind": "client", "outcome": "requested"})

    def store_call(self, operation: str, outcome: StoreOutcome, seconds: float) -> None:
        metrics = self.hub.metrics
        if metrics is not None:
            metrics.child(metrics.store_operations, operation, outcome).inc()
            metrics.child(metrics.store_duration, operation).observe(seconds)
        if self.span is not None and self.hub.tracer is not None:
            span = start_child_span(self.hub.tracer, self.span, f"duet.store {operation}", {"duet.store.outcome": outcome},
                                    time.time_ns() - int(seconds * 1e9))
            span.end()
        self._log_call({"store": operation, "outcome": outcome, "ms": _ms(seconds)})

    def usage(self, stage: Stage, usage: Usage) -> None:
        """Tokens no model call's result reported: an estimate, or a reused reasoning (none new). Its
        model call's span has ended by then: the request's span gets them as an event."""
        self.stage(stage).count(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.origin)
        if self.span is not None:
            self.span.add_event("duet.usage", {"duet.stage": stage, "duet.usage.source": usage.origin,
                                               "gen_ai.usage.input_tokens": usage.prompt_tokens,
                                               "gen_ai.usage.output_tokens": usage.completion_tokens})
        metrics = self.hub.metrics
        if metrics is not None:
            count_tokens(metrics, (self.pipeline, stage), usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                         usage.origin)

    # Bookkeeping

    def stage(self, stage: str) -> _Stage:
        figures = self.stages.get(stage)
        if figures is None:
            figures = self.stages[stage] = _Stage()
        return figures

    def begin_wait(self) -> float:
        now = time.perf_counter()
        if self._busy == 0:
            self._busy_since = now
        self._busy += 1
        return now

    def end_wait(self) -> float:
        now = time.perf_counter()
        self._busy -= 1
        if self._busy == 0:
            self.waited += now - self._busy_since
        return now

    def _log_call(self, call: dict[str, Any]) -> None:
        if len(self.calls) < MAX_LOGGED_CALLS:
            self.calls.append(call)
        else:
            self.more_calls += 1

    def finish(self, status: int) -> None:
        """The response is over (sent, or given up): counts it, ends its span, writes its log line."""
        duration = time.perf_counter() - self.started
        overhead = duration - self.waited if self.stages else None
        hub = self.hub
        metrics = hub.metrics
        if metrics is not None:
            metrics.in_flight.dec()
            metrics.child(metrics.requests, self.pipeline, self.protocol, str(status)).inc()
            metrics.child(metrics.duration, self.pipeline, self.protocol).observe(duration)
            if self.first_token is not None:  # a series only for what happened (a refused request has no first token)
                metrics.child(metrics.first_token, self.pipeline, self.protocol).observe(self.first_token)
            if overhead is not None:
                metrics.child(metrics.overhead, self.pipeline, self.protocol).observe(max(overhead, 0.0))
        if self.span is not None:
            self.span.set_attribute("http.response.status_code", status)
            if self.pipeline:
                self.span.set_attribute("duet.pipeline", self.pipeline)
            for name, figures in self.stages.items():  # every stage's tokens, counted or estimated
                self.span.set_attributes({f"duet.{name}.usage.input_tokens": figures.input_tokens,
                                          f"duet.{name}.usage.output_tokens": figures.output_tokens,
                                          f"duet.{name}.usage.source": ",".join(figures.sources) or "upstream"})
            if status >= 500:
                self.span.set_status(StatusCode.ERROR)
            self.span.end()
        log = hub.log
        if log.isEnabledFor(logging.INFO):
            fields: dict[str, Any] = {"status": status}
            if self.pipeline:
                fields["pipeline"] = self.pipeline
            fields["protocol"] = self.protocol
            if self.stream is not None:
                fields["stream"] = self.stream
            fields["duration_ms"] = _ms(duration)
            if self.first_token is not None:
                fields["ttft_ms"] = _ms(self.first_token)
            if overhead is not None:
                fields["overhead_ms"] = _ms(max(overhead, 0.0))
            for stage, figures in self.stages.items():
                fields[stage] = figures.fields()
            if self.calls:
                fields["calls"] = self.calls
            if self.more_calls:
                fields["more_calls"] = self.more_calls
            if json_lines():  # the formatter writes the fields (and masks the line)
                write_line(log, "request", extra={"request_fields": {"method": self.method, "path": self.path, **fields}})
            else:
                write_line(log, "%s %s %s", self.method, self.path, logfmt(fields))


class _ModelCall:
    """One model call (a :class:`~duet.agents._observe.ModelCallObserver`)."""

    __slots__ = ("request", "stage", "model", "started", "first", "span", "headers")

    def __init__(self, request: RequestObservation, stage: Stage, model: str) -> None:
        self.request = request
        self.stage = stage
        self.model = model
        self.first: float | None = None
        self.span: Span | None = None
        self.headers = request.upstream_headers
        tracer = request.hub.tracer
        if tracer is not None and request.span is not None:
            self.span = start_child_span(tracer, request.span, f"chat {model}", {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": model,
                "duet.stage": stage})
            self.headers = propagation_headers(self.span)
        self.started = request.begin_wait()

    def first_piece(self) -> None:
        request = self.request
        self.first = now = time.perf_counter()
        if request.first_token is None:
            request.first_token = now - request.started

    def ended(self, result: CreateResult | None, error: BaseException | None) -> None:
        request = self.request
        ended = request.end_wait()
        seconds = ended - self.started
        figures = request.stage(self.stage)
        figures.calls += 1
        figures.seconds += seconds
        first_token = self.first - self.started if self.first is not None else None
        if figures.first_token is None and first_token is not None:
            figures.first_token = first_token
        code = None
        if error is not None and not isinstance(error, (GeneratorExit, asyncio.CancelledError)):
            code = upstream_error_code(error)
            figures.errors.append(code)
        usage = result.usage if result is not None else None
        cached = getattr(result, "cached_tokens", 0) or 0
        if usage is not None:
            figures.count(usage.prompt_tokens, usage.completion_tokens, cached, "upstream")
        metrics = request.hub.metrics
        if metrics is not None:
            labels = (request.pipeline, self.stage)
            metrics.child(metrics.upstream_duration, *labels).observe(seconds)
            if first_token is not None:  # a series only for what happened (a failed call may have none)
                metrics.child(metrics.upstream_first_token, *labels).observe(first_token)
            if usage is not None:
                count_tokens(metrics, labels, usage.prompt_tokens, usage.completion_tokens, cached, "upstream")
            if code is not None:
                metrics.child(metrics.upstream_errors, request.pipeline, self.stage, code).inc()
        span = self.span
        if span is not None:
            if result is not None:
                span.set_attribute("gen_ai.response.finish_reasons",
                                   [_FINISH_REASONS.get(result.finish_reason, result.finish_reason)])
            if usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
            if code is not None:
                span.set_attribute("error.type", code)
                span.set_status(StatusCode.ERROR, str(error)[:200])
            elif error is not None:
                span.set_attribute("duet.outcome", "stopped" if isinstance(error, GeneratorExit) else "cancelled")
            span.end()


class _ToolCall:
    """One service-tool call (a :class:`~duet.agents._observe.ToolCallObserver`)."""

    __slots__ = ("request", "tool", "started", "span")

    def __init__(self, request: RequestObservation, tool: str) -> None:
        self.request = request
        self.tool = tool
        self.span: Span | None = None
        tracer = request.hub.tracer
        if tracer is not None and request.span is not None:
            self.span = start_child_span(tracer, request.span, f"execute_tool {tool}", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.type": "function"})
        self.started = request.begin_wait()

    def ended(self, is_error: bool, error: BaseException | None) -> None:
        request = self.request
        seconds = request.end_wait() - self.started
        outcome = "cancelled" if isinstance(error, asyncio.CancelledError) else "error" if is_error or error else "ok"
        metrics = request.hub.metrics
        if metrics is not None:
            tool = metrics.service_tools(self.tool)
            metrics.child(metrics.tool_calls, "service", tool, outcome).inc()
            metrics.child(metrics.tool_duration, tool).observe(seconds)
        if self.span is not None:
            if outcome != "ok":
                self.span.set_attribute("error.type", outcome)
                self.span.set_status(StatusCode.ERROR)
            self.span.end()
        request._log_call({"tool": self.tool[:64], "kind": "service", "outcome": outcome, "ms": _ms(seconds)})


def count_tokens(metrics: Metrics, labels: tuple[str, str], prompt_tokens: int, completion_tokens: int, cached_tokens: int,
                 source: str) -> None:
    """``duet_tokens_total`` for one model call (or one estimate, one reuse) of a stage."""
    metrics.child(metrics.tokens, *labels, "input", source).inc(prompt_tokens)
    metrics.child(metrics.tokens, *labels, "output", source).inc(completion_tokens)
    if cached_tokens:
        metrics.child(metrics.tokens, *labels, "cached", source).inc(cached_tokens)


_current: ContextVar[RequestObservation | None] = ContextVar("duet_request_observation", default=None)


def current_observation() -> RequestObservation | None:
    """The request being served by the calling task, or ``None`` (not observed)."""
    return _current.get()
