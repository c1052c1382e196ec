"""Several server processes on one port: ``duet serve --workers N``.

The parent binds the port once and starts N workers, each a fresh interpreter (``multiprocessing``
spawn) that builds its own app from the configuration the parent resolved and serves the shared
socket with the same server as a single process (:func:`duet.api.server._server.serve`: the edge's limits,
readiness, the graceful drain). The kernel hands each new connection to one of them. The parent
serves nothing: it replaces a worker that dies, and on SIGTERM or SIGINT has every worker drain,
then exits 0. What a tool round leaves for its follow-up waits in the shared continuation store
(SQLite or Redis), since the follow-up may reach another worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from duet.api._app import ServiceConfig
from duet.api.observability import SharedMetrics
from duet.api.server._server import ABORT_GRACE_SECONDS, LIFESPAN_SHUTDOWN_SECONDS

logger = logging.getLogger("duet")

LISTEN_BACKLOG = 2048  # uvicorn's: connections wait in it while the workers start
POLL_SECONDS = 1.0  # the longest the parent waits without looking at its workers again
STARTUP_FAILURE = 3  # uvicorn's exit code for an app that could not start, kept by the parent


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker serves, resolved once by the parent (flags, ``DUET_*``, the YAML file)."""

    config: ServiceConfig
    host: str
    port: int
    log_level: str


def listen(host: str, port: int) -> socket.socket:
    """The one listening socket of every worker. Raises ``OSError`` (a port in use, a bad address)."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


def run_worker(spec: WorkerSpec, listener: socket.socket, started: Connection) -> None:
    """One worker process: builds the app and serves ``listener`` until SIGTERM or SIGINT; sends its
    pid on ``started`` once it serves."""
    from duet.api._app import create_app
    from duet.api.server._process import start_process
    from duet.api.server._server import serve

    _stop_with_the_parent()
    start_process(spec.log_level, spec.config.options.log_format, worker=True)
    try:
        app = create_app(spec.config)
    except Exception as exc:  # noqa: BLE001 - reported to the operator, then exit
        print(f"duet: worker {os.getpid()} cannot start: {exc}", file=sys.stderr)
        raise SystemExit(STARTUP_FAILURE) from None
    serve(app, spec.config.options, app.state.gate, host=spec.host, port=spec.port, log_level=spec.log_level,
          sockets=[listener], on_started=lambda: started.send(os.getpid()))


def _stop_with_the_parent() -> None:
    """A worker whose parent was killed (and so cannot stop it) drains and exits as on SIGTERM."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])  # a daemon thread: it waits as long as the process lives
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="duet-parent-watch", daemon=True).start()


@dataclass
class _Worker:
    process: BaseProcess
    started: Connection  # the worker sends its pid here once it serves
    serving: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid or 0


def _exit_status(process: BaseProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


class Supervisor:
    """Starts ``count`` workers on ``listener``, keeps them running, and stops them on SIGTERM or
    SIGINT: each drains for the options' ``shutdown_timeout`` as one process does; a second SIGINT
    ends them at once. :meth:`run` returns the exit code."""

    def __init__(self, spec: WorkerSpec, listener: socket.socket, count: int) -> None:
        self._spec = spec
        self._listener = listener
        self._count = count
        self._context = multiprocessing.get_context("spawn")  # a fresh interpreter: no state shared by fork
        self._workers: list[_Worker] = []
        self._signals: list[int] = []
        self._announced = False
        self._metrics: SharedMetrics  # made by run(), before the workers

    def run(self) -> int:
        wakeup_read, wakeup_write = socket.socketpair()
        wakeup_write.setblocking(False)
        previous = {sig: signal.signal(sig, lambda number, _frame: self._signals.append(number))
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        previous_wakeup = signal.set_wakeup_fd(wakeup_write.fileno())  # a signal ends the wait below at once
        self._metrics = SharedMetrics()  # before the first worker starts: each reads where to write
        try:
            self._workers = [self._start() for _ in range(self._count)]
            code = self._supervise(wakeup_read)
            self._stop(wakeup_read)
            return code
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            wakeup_read.close()
            wakeup_write.close()
            self._listener.close()
            self._metrics.close()

    def _start(self) -> _Worker:
        started_read, started_write = self._context.Pipe(duplex=False)
        process = self._context.Process(target=run_worker, args=(self._spec, self._listener, started_write),
                                        name="duet-worker", daemon=False)
        process.start()
        started_write.close()  # the worker has its own copy
        return _Worker(process, started_read)

    def _supervise(self, wakeup: socket.socket) -> int:
        """Until a signal (returns 0) or a worker that exits before it serves (returns :data:`STARTUP_FAILURE`)."""
        while True:
            waiting_for: list[socket.socket | int | Connection] = [wakeup, *(w.process.sentinel for w in self._workers),
                           *(w.started for w in self._workers if not w.serving)]
            ready = wait(waiting_for, POLL_SECONDS)
            if wakeup in ready:
                wakeup.recv(4096)
            if self._signals:
                self._signals.clear()
                return 0
            for index, worker in enumerate(self._workers):
                if not worker.serving and worker.started in ready:
                    try:
                        worker.started.recv()
                        worker.serving = True
                    except (EOFError, OSError):
                        pass  # it exited: its sentinel says so
                if worker.process.is_alive():
                    continue
                worker.process.join()
                worker.started.close()
                self._metrics.worker_exited(worker.pid)
                if not worker.serving:
                    logger.error("worker %d ended (%s) before it served: stopping", worker.pid, _exit_status(worker.process))
                    return STARTUP_FAILURE
                logger.warning("worker %d ended (%s): starting another", worker.pid, _exit_status(worker.process))
                self._workers[index] = self._start()
            if not self._announced and all(w.serving for w in self._workers):
                self._announced = True
                logger.info("serving on %s:%d with %d workers (pids %s)", self._spec.host, self._spec.port, len(self._workers),
                            ", ".join(str(w.pid) for w in self._workers))

    def _stop(self, wakeup: socket.socket) -> None:
        """Every worker drains, then exits; one that outlives the whole drain is killed."""
        self._listener.close()  # the workers close theirs as they start draining: new connections are refused
        drain = self._spec.config.options.shutdown_timeout
        logger.info("stopping %d workers: draining for up to %g s", len(self._workers), drain)
        for worker in self._workers:
            if worker.process.is_alive():
                os.kill(worker.pid, signal.SIGTERM)
        limit = drain + ABORT_GRACE_SECONDS + LIFESPAN_SHUTDOWN_SECONDS + 5.0  # a worker's own bounds, and some
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and any(w.process.is_alive() for w in self._workers):
            ready = wait([wakeup, *(w.process.sentinel for w in self._workers if w.process.is_alive())], POLL_SECONDS)
            if wakeup in ready:
                wakeup.recv(4096)
            if signal.SIGINT in self._signals:  # a second Ctrl-C: end now, as one process does
                self._signals.clear()
                for worker in self._workers:
                    if worker.process.is_alive():
                        os.kill(worker.pid, signal.SIGINT)
        for worker in self._workers:
            if worker.process.is_alive():
                logger.warning("worker %d did not stop within %g s: killing it", worker.pid, limit)
                worker.process.kill()
            worker.process.join(5)
            worker.started.close()
