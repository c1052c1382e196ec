"""What each worker says of itself, sampled off the request path: its saturation, the request bytes
it holds, whether its state store answers, its CPU, memory and open files (prometheus-client's own
process collector has no multiprocess mode), and the build it runs.

One task per worker (:class:`WorkerSampler`, started by the app's lifespan) samples every
:data:`SAMPLE_SECONDS` and asks the state store every :data:`STORE_PING_SECONDS`, so that a worker
with no tool rounds still finds out that its store went out or came back (the store's guard logs
each change once). Nothing here is on a request's path: a request pays nothing for these gauges.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import resource
from importlib.metadata import PackageNotFoundError, version
from typing import Callable, Protocol

from duet.agents.continuations import ContinuationStore, GuardedStore

from duet.api.observability._metrics import Metrics

logger = logging.getLogger("duet")

SAMPLE_SECONDS = 1.0
STORE_PING_SECONDS = 5.0
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Admissions(Protocol):
    """What the sampler reads of the edge (:class:`duet.api._limits.RequestGate`)."""

    max_running: int
    starting: int
    pending_body_bytes: int


def _installed(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


def record_build_info(metrics: Metrics) -> None:
    """``duet_build_info{version, python, autogen} 1``."""
    metrics.build_info.labels(_installed("autogen-duet"), platform.python_version(), _installed("autogen-core")).set(1)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def resident_bytes() -> int | None:
    """From ``/proc/self/statm`` (Linux); None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return None


def open_fds() -> int | None:
    """From ``/proc/self/fd`` (Linux); None elsewhere."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


class WorkerSampler:
    """Samples this worker into ``metrics`` until :meth:`stop`. ``running``: the completions this
    worker runs now (the service's count; 0 until the service is made)."""

    def __init__(self, metrics: Metrics, gate: Admissions, store: ContinuationStore, running: Callable[[], int]) -> None:
        self._metrics = metrics
        self._gate = gate
        self._store = store
        self._running = running
        worker = str(os.getpid())
        self._saturation = metrics.saturation.labels(worker)
        self._pending = metrics.pending_body_bytes.labels(worker)
        self._store_up = metrics.store_up.labels(worker)
        self._held_writes = metrics.store_held_writes.labels(worker)
        self._dropped_writes = metrics.store_dropped_writes.labels(worker)
        self._dropped_counted = 0
        self._cpu = metrics.process_cpu.labels(worker)
        self._memory = metrics.process_memory.labels(worker)
        self._fds = metrics.process_fds.labels(worker)
        self._cpu_counted = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        record_build_info(self._metrics)
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="duet-worker-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def sample(self) -> None:
        gate = self._gate
        self._saturation.set(min((self._running() + gate.starting) / gate.max_running, 1.0))
        self._pending.set(gate.pending_body_bytes)
        self._store_up.set(1 if self._store.available else 0)
        if isinstance(self._store, GuardedStore):
            self._held_writes.set(self._store.held_writes)
            self._dropped_writes.inc(self._store.dropped_writes - self._dropped_counted)
            self._dropped_counted = self._store.dropped_writes
        cpu = cpu_seconds()
        self._cpu.inc(max(cpu - self._cpu_counted, 0.0))
        self._cpu_counted = cpu
        memory, fds = resident_bytes(), open_fds()
        if memory is not None:
            self._memory.set(memory)
        if fds is not None:
            self._fds.set(fds)

    async def _run(self) -> None:
        ticks_per_ping = max(round(STORE_PING_SECONDS / SAMPLE_SECONDS), 1)
        tick = 0
        while True:
            await asyncio.sleep(SAMPLE_SECONDS)
            tick += 1
            if tick % ticks_per_ping == 0:
                await self._ping_store()
            try:
                self.sample()
            except Exception:  # a gauge that cannot be sampled is no reason to stop the others
                logger.exception("sampling the worker's metrics failed")

    async def _ping_store(self) -> None:
        """The store's guard bounds the ping and logs a change of state once; its failure is the gauge's 0."""
        try:
            await asyncio.wait_for(self._store.ping(), STORE_PING_SECONDS)
        except Exception:  # noqa: BLE001 - StoreUnavailable, or anything from an unguarded store (given from Python)
            pass
