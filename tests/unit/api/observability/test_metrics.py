"""The metrics' lighter counting (api/observability/_metrics.py) counts as prometheus-client's own."""

from __future__ import annotations

import re

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from duet.api.observability._metrics import Counter, Gauge, Histogram

BUCKETS = (0.1, 1.0, 10.0)


def _exposition(counter: type, histogram: type, gauge: type) -> str:
    registry = CollectorRegistry()
    requests = counter("requests", "r", ["status"], registry=registry)
    plain = counter("plain", "p", registry=registry)
    seconds = histogram("seconds", "s", ["stage"], buckets=BUCKETS, registry=registry)
    in_flight = gauge("in_flight", "i", registry=registry)
    for status, amount in (("200", 1), ("200", 2.5), ("500", 1)):
        requests.labels(status).inc(amount)
    plain.inc()
    for stage, amount in (("a", 0.05), ("a", 0.1), ("a", 5.0), ("b", 99.0), ("b", float("inf"))):
        seconds.labels(stage).observe(amount)
    in_flight.inc()
    in_flight.inc(3)
    in_flight.dec()
    text = generate_latest(registry).decode()
    return re.sub(r"(_created\{?[^ ]*) [0-9.e+]+", r"\1 T", text)  # creation times differ


def test_counts_as_prometheus_clients_own_metrics() -> None:
    assert _exposition(Counter, Histogram, Gauge) == _exposition(
        prometheus_client.Counter, prometheus_client.Histogram, prometheus_client.Gauge)


def test_refuses_what_prometheus_client_refuses() -> None:
    registry = CollectorRegistry()
    with pytest.raises(ValueError):
        Counter("c", "c", ["x"], registry=registry).inc()  # a labelled parent
    with pytest.raises(ValueError):
        Counter("d", "d", registry=registry).inc(-1)
    with pytest.raises(ValueError):
        Histogram("h", "h", ["x"], registry=registry).observe(1.0)
    with pytest.raises(ValueError):
        Gauge("g", "g", ["x"], registry=registry).dec()
    with pytest.raises(RuntimeError):
        Gauge("m", "m", registry=registry, multiprocess_mode="mostrecent").inc()
