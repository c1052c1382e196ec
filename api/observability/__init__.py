"""Watching the service: Prometheus metrics, OpenTelemetry traces and one log line per request.

The agents report their model, tool and store calls through :mod:`duet.agents._observe`; this package
is the service's side of it, and of each HTTP request.

Public API:

- :class:`Observability` — what an app records with (the process's metrics, the tracer if on);
- :class:`ObservedRequests` — the ASGI middleware: request ids, one observation per request;
  :func:`current_observation` — the :class:`RequestObservation` of the calling request (the run's observer);
- :func:`add_metrics_route` — ``GET /metrics``; :class:`SharedMetrics` — the workers' shared directory;
- :func:`configure_logging` — text or JSON lines naming the request (and the worker);
- :func:`configure_tracing` — traces as the ``OTEL_*`` variables say; :func:`flush_traces` — sends what waits;
- :class:`WorkerSampler` — the worker's own gauges (saturation, store, process), sampled off the request path.
"""

from duet.api.observability._http import ObservedRequests, add_metrics_route
from duet.api.observability._logs import configure_logging
from duet.api.observability._metrics import SharedMetrics
from duet.api.observability._requests import Observability, RequestObservation, current_observation
from duet.api.observability._sampler import WorkerSampler
from duet.api.observability._tracing import configure_tracing, flush_traces

__all__ = [
    "Observability",
    "ObservedRequests",
    "RequestObservation",
    "SharedMetrics",
    "WorkerSampler",
    "add_metrics_route",
    "configure_logging",
    "configure_tracing",
    "current_observation",
    "flush_traces",
]
