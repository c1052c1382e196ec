"""The service's Prometheus metrics: their names, labels and buckets, and how they are exposed.

One set per process, created on first use. With several workers (``duet serve --workers N``) the
parent makes a directory for prometheus-client's multiprocess mode before it starts them
(:class:`SharedMetrics`), each worker writes its values there, and ``/metrics`` on any worker adds up
every worker's (a worker that died keeps its counts; its in-flight gauge is dropped).

Label values are bounded: pipelines and stages come from the configuration, statuses and error codes
from small fixed sets, and tool names (which requests and models choose) through :class:`BoundedLabels`.
No label ever holds user text or an id.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from typing import Any

import prometheus_client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import multiprocess
from prometheus_client.values import MutexValue

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""The variable prometheus-client reads, in each worker, for the directory the workers share."""

CONTENT_TYPE = CONTENT_TYPE_LATEST

MAX_TOOL_LABELS = 64
"""Distinct tool names a process labels per kind (client, service); later ones count as ``other``."""

OTHER = "other"

REQUEST_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
FIRST_TOKEN_SECONDS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OVERHEAD_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
TOOL_SECONDS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 120.0)
STORE_SECONDS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 2.0)


class Counter(prometheus_client.Counter):
    """A ``Counter`` whose ``inc`` checks that it may count without two method calls and, in one
    process, adds under its value's lock without the value's method: a request counts a dozen times,
    and each call is CPU every request pays."""

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        # Mirrors Counter.inc of prometheus-client 0.26 (pinned in constraints.txt), _raise_if_not_observable inlined.
        if exemplar or amount < 0 or (self._labelnames and not self._labelvalues):
            super().inc(amount, exemplar)  # raises, or sets the exemplar, as stock
            return
        value = self._value
        if type(value) is MutexValue:  # Mirrors MutexValue.inc of prometheus-client 0.26 (pinned)
            with value._lock:
                value._value += amount
        else:  # a worker's file (multiprocess mode)
            value.inc(amount)


class Histogram(prometheus_client.Histogram):
    """A ``Histogram`` whose ``observe`` checks that it may count without two method calls, and adds
    in one process without its values' method (see :class:`Counter`)."""

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        # Mirrors Histogram.observe of prometheus-client 0.26 (pinned in constraints.txt), _raise_if_not_observable inlined.
        if exemplar or (self._labelnames and not self._labelvalues):
            super().observe(amount, exemplar)  # raises, or sets the exemplar, as stock
            return
        total = self._sum
        if type(total) is not MutexValue:  # a worker's files (multiprocess mode)
            total.inc(amount)
            for index, bound in enumerate(self._upper_bounds):
                if amount <= bound:
                    self._buckets[index].inc(1)
                    break
            return
        with total._lock:  # MutexValue.inc of prometheus-client 0.26 (pinned), inlined
            total._value += amount
        for index, bound in enumerate(self._upper_bounds):
            if amount <= bound:
                bucket = self._buckets[index]
                with bucket._lock:
                    bucket._value += 1
                break


class Gauge(prometheus_client.Gauge):
    """A ``Gauge`` whose ``inc`` and ``dec`` (the requests in flight: twice a request) check that they
    may count without two method calls, and add in one process without the value's method (see :class:`Counter`)."""

    def inc(self, amount: float = 1) -> None:
        # Mirrors Gauge.inc of prometheus-client 0.26 (pinned in constraints.txt), _raise_if_not_observable inlined.
        if self._is_most_recent or (self._labelnames and not self._labelvalues) or type(self._value) is not MutexValue:
            super().inc(amount)  # raises, or writes the worker's file, as stock
            return
        value = self._value
        with value._lock:  # MutexValue.inc of prometheus-client 0.26 (pinned), inlined
            value._value += amount

    def dec(self, amount: float = 1) -> None:
        # Mirrors Gauge.dec of prometheus-client 0.26 (pinned in constraints.txt), as inc above.
        if self._is_most_recent or (self._labelnames and not self._labelvalues) or type(self._value) is not MutexValue:
            super().dec(amount)  # raises, or writes the worker's file, as stock
            return
        value = self._value
        with value._lock:
            value._value -= amount


class BoundedLabels:
    """Label values chosen by others (tool names), kept to at most ``limit`` distinct ones: each name
    that is a plain identifier is kept as long as there is room, anything else is ``other``."""

    _PLAIN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

    def __init__(self, limit: int = MAX_TOOL_LABELS) -> None:
        self._limit = limit
        self._known: set[str] = set()
        self._lock = threading.Lock()  # sync tools report from worker threads

    def __call__(self, value: str) -> str:
        if value in self._known:
            return value
        if len(self._known) >= self._limit or not self._PLAIN.fullmatch(value):
            return OTHER
        with self._lock:
            if len(self._known) < self._limit:
                self._known.add(value)
                return value
        return OTHER


class Metrics:
    """Every metric the service exports (the manual's list: docs/operations.md, "Metrics, traces, logs")."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        request = ["pipeline", "protocol"]
        upstream = ["pipeline", "stage"]
        self.requests = Counter("duet_requests", "Requests by pipeline, protocol and HTTP status.",
                                [*request, "status"], registry=registry)
        self.in_flight = Gauge("duet_requests_in_flight", "Requests being served (all workers together).",
                               registry=registry, multiprocess_mode="livesum")
        self.first_token = Histogram("duet_time_to_first_token_seconds",
                                     "From a request's arrival to the first token of its first model call.",
                                     request, buckets=FIRST_TOKEN_SECONDS, registry=registry)
        self.duration = Histogram("duet_request_duration_seconds", "From a request's arrival to the end of its response.",
                                  request, buckets=REQUEST_SECONDS, registry=registry)
        self.overhead = Histogram("duet_overhead_seconds",
                                  "Duet's own time in a request that ran a pipeline: its duration less the time a model "
                                  "call or a service tool was running.", request, buckets=OVERHEAD_SECONDS, registry=registry)
        self.upstream_duration = Histogram("duet_upstream_duration_seconds", "Model calls, from request to the stream's end.",
                                           upstream, buckets=REQUEST_SECONDS, registry=registry)
        self.upstream_first_token = Histogram("duet_upstream_time_to_first_token_seconds",
                                              "Model calls, from request to the upstream's first piece.",
                                              upstream, buckets=FIRST_TOKEN_SECONDS, registry=registry)
        self.tokens = Counter("duet_tokens", "Tokens by direction (input, output, cached: input the upstream read from its "
                              "prompt cache) and source (upstream: its own count; estimate: Duet's, for a call it closed "
                              "early; reused: a retry's reused reasoning, no new tokens).",
                              [*upstream, "direction", "source"], registry=registry)
        self.upstream_errors = Counter("duet_upstream_errors", "Failed model calls by upstream HTTP status or failure kind.",
                                       [*upstream, "code"], registry=registry)
        self.tool_calls = Counter("duet_tool_calls", "Tool calls: service tools run (ok, error, cancelled); client tools "
                                  "handed to the client (requested).", ["kind", "tool", "outcome"], registry=registry)
        self.tool_duration = Histogram("duet_tool_duration_seconds", "Service-tool calls.", ["tool"],
                                       buckets=TOOL_SECONDS, registry=registry)
        self.store_operations = Counter("duet_store_operations", "Continuation-store calls of tool rounds "
                                        "(outcome: ok, miss, unavailable, cancelled).", ["operation", "outcome"], registry=registry)
        self.store_duration = Histogram("duet_store_duration_seconds", "Continuation-store calls.", ["operation"],
                                        buckets=STORE_SECONDS, registry=registry)
        self._add_worker_metrics(registry)
        self.client_tools = BoundedLabels()
        self.service_tools = BoundedLabels()
        self._children: dict[tuple[Any, ...], Any] = {}

    def _add_worker_metrics(self, registry: CollectorRegistry) -> None:
        """What each worker says of itself, sampled (:mod:`duet.api.observability._sampler`): labelled
        ``worker`` (its pid); a worker that exits drops out of the gauges (``livesum`` of one series each)."""
        worker = ["worker"]
        self.build_info = Gauge("duet_build_info", "1, labelled with the versions of Duet, Python and AutoGen.",
                                ["version", "python", "autogen"], registry=registry, multiprocess_mode="max")
        self.saturation = Gauge("duet_saturation_ratio", "Completions running or starting over max_concurrent_requests (0..1).",
                                worker, registry=registry, multiprocess_mode="livesum")
        self.pending_body_bytes = Gauge("duet_pending_body_bytes", "Request body bytes being read or parsed (against "
                                        "max_pending_body_bytes).", worker, registry=registry, multiprocess_mode="livesum")
        self.store_up = Gauge("duet_store_up", "1 while the state store answers, 0 while it is out (the worker serves degraded).",
                              worker, registry=registry, multiprocess_mode="livesum")
        self.store_held_writes = Gauge("duet_store_held_writes", "Writes held in the worker while its store fails over "
                                       "(written to the new primary once it answers).", worker, registry=registry,
                                       multiprocess_mode="livesum")
        self.store_dropped_writes = Counter("duet_store_dropped_writes", "Writes held during a store failover, then dropped "
                                            "(it outlasted store_failover_wait, or the worker stopped).", worker, registry=registry)
        self.process_cpu = Counter("duet_process_cpu_seconds", "User and system CPU time of the worker process.",
                                   worker, registry=registry)
        self.process_memory = Gauge("duet_process_resident_memory_bytes", "Resident memory of the worker process.",
                                    worker, registry=registry, multiprocess_mode="livesum")
        self.process_fds = Gauge("duet_process_open_fds", "Open file descriptors of the worker process (connections among them).",
                                 worker, registry=registry, multiprocess_mode="livesum")

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once per label set (prometheus-client checks and locks on each call)."""
        key = (metric, *labels)  # a metric hashes by identity (in C: no id() call per lookup)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


_metrics: Metrics | None = None
_metrics_lock = threading.Lock()


def process_metrics() -> Metrics:
    """This process's metrics (created on first use: prometheus-client reads :data:`MULTIPROCESS_DIR` then)."""
    global _metrics
    if _metrics is None:
        with _metrics_lock:
            if _metrics is None:
                _metrics = Metrics(CollectorRegistry(auto_describe=True))
    return _metrics


def exposition() -> bytes:
    """The text a scrape gets: every worker's values added up when they share a directory."""
    if os.environ.get(MULTIPROCESS_DIR):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(process_metrics().registry)


class SharedMetrics:
    """The parent's side of the workers' shared metrics: a fresh directory, named to the workers in
    :data:`MULTIPROCESS_DIR` (they are spawned after it is set), removed when the parent is done."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="duet-metrics-")
        self._previous = os.environ.get(MULTIPROCESS_DIR)
        os.environ[MULTIPROCESS_DIR] = self.directory

    def worker_exited(self, pid: int) -> None:
        """A worker is gone: its in-flight requests no longer count (its counters stay)."""
        multiprocess.mark_process_dead(pid, self.directory)

    def close(self) -> None:
        if self._previous is None:
            os.environ.pop(MULTIPROCESS_DIR, None)
        else:
            os.environ[MULTIPROCESS_DIR] = self._previous
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "SharedMetrics":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
