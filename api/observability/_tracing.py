"""OpenTelemetry traces, on when the standard ``OTEL_*`` variables ask for an exporter.

On when ``OTEL_TRACES_EXPORTER`` is ``otlp`` or ``console``, or, with it unset, when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; off otherwise, with
``OTEL_TRACES_EXPORTER=none`` or ``OTEL_SDK_DISABLED=true``. OTLP goes over HTTP (protobuf); the SDK
reads the rest of its settings itself (endpoint, headers, timeout, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``). Off, no span is made and nothing of the SDK is imported.

The span names and attributes follow OpenTelemetry's semantic conventions: an HTTP server span per
request, a GenAI client span per model call (``chat {model}``) and per service-tool call
(``execute_tool {tool}``).
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE_LIMIT = 512  # the W3C list holds at most 32 members; longer is not worth passing on
EXPORTERS = ("otlp", "console", "none")


def tracing_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces. Raises ``ValueError`` for a setting Duet cannot honour."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    for name in exporters:
        if name not in EXPORTERS:
            raise ValueError(f"OTEL_TRACES_EXPORTER={name} is not supported: use otlp, console or none")
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    wanted = any(name != "none" for name in exporters) if exporters else bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    if wanted and "otlp" in (exporters or ["otlp"]) and protocol.strip() != "http/protobuf":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: use http/protobuf")
    return wanted


_tracer: Tracer | None = None
_provider: Any = None  # the SDK's TracerProvider, once traces are on


def configure_tracing(environ: Mapping[str, str] = os.environ) -> bool:
    """Makes the tracer provider the ``OTEL_*`` variables describe (once per process). Duet's own,
    not the global one: what else in the process traces through the global provider (FastAPI's
    native telemetry, AutoGen's runtime) stays as the process configures it, and no request gets
    two server spans. Returns whether traces are on."""
    global _tracer, _provider
    if _tracer is not None or not tracing_wanted(environ):
        return _tracer is not None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    exporters = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if name.strip()]
    attributes = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": "duet"}
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in exporters:
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        elif name == "console":
            exporter = ConsoleSpanExporter()
        else:
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _tracer, _provider = provider.get_tracer("duet"), provider
    return True


def flush_traces(timeout: float) -> None:
    """Exports the spans still batched, for at most ``timeout`` seconds (the server calls it as it
    stops: a process ended by its signal runs no exit handlers)."""
    if _provider is not None:
        _provider.force_flush(int(timeout * 1000))


def process_tracer() -> Tracer | None:
    """The tracer :func:`configure_tracing` made, or ``None``: traces are off."""
    return _tracer


def incoming_trace(traceparent: str | None, tracestate: str | None) -> dict[str, str] | None:
    """The client's W3C trace headers, if well formed (else ``None``: the request starts a trace)."""
    if traceparent is None or not _TRACEPARENT.fullmatch(traceparent) or traceparent.startswith("ff"):
        return None
    carrier = {"traceparent": traceparent}
    if tracestate and len(tracestate) <= _TRACESTATE_LIMIT and tracestate.isprintable():
        carrier["tracestate"] = tracestate
    return carrier


def start_request_span(tracer: Tracer, name: str, parent: Mapping[str, str] | None, start_ns: int,
                       attributes: Mapping[str, Any]) -> Span:
    """The server span of one request, the child of the client's span when it sent ``traceparent``."""
    context = _PROPAGATOR.extract(parent) if parent else None
    return tracer.start_span(name, context=context, kind=SpanKind.SERVER, start_time=start_ns, attributes=attributes)


def start_child_span(tracer: Tracer, parent: Span, name: str, attributes: Mapping[str, Any],
                     start_ns: int | None = None) -> Span:
    return tracer.start_span(name, context=trace.set_span_in_context(parent), kind=SpanKind.CLIENT,
                             start_time=start_ns, attributes=attributes)


def propagation_headers(span: Span) -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) naming ``span``: the upstream's work becomes its child."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier
