"""The lean runtime's message loop: a run context whose loop starts with the first queued message and
whose stop signal is a flag, and the message queue that starts it (autogen-core 0.7.5, pinned)."""

from __future__ import annotations

import asyncio
from typing import Any

from autogen_core import SingleThreadedAgentRuntime
from autogen_core._queue import Queue
from autogen_core._single_threaded_agent_runtime import RunContext

from duet.agents.runtime._queues import LinesMadeOnUse, lighten_queue


class _StopFlag:
    """What ``RunContext`` asks of its ``asyncio.Event``, which nothing awaits: set and read."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class LeanRunContext(RunContext):
    """autogen-core's ``RunContext`` (0.7.5, pinned) with a flag for its stop signal instead of an
    ``asyncio.Event`` and the waiting list every event makes (its loop only reads the signal), and
    whose message loop starts with the first message queued (:meth:`start_loop`): a lean runtime
    hands most messages straight to their handlers, and a loop task waiting on an empty queue costs
    a task and its coroutines for every team in a run. Stopping works as the stock context's: a
    handler's failure that no loop raised is raised by ``stop`` and ``stop_when_idle``."""

    def __init__(self, runtime: SingleThreadedAgentRuntime) -> None:  # RunContext.__init__ would make the event
        self._runtime = runtime
        self._run_task: asyncio.Task[None] | None = None  # type: ignore[assignment]  # none until the first message
        self._stopped = _StopFlag()  # type: ignore[assignment]
        if not runtime._message_queue.empty():  # queued before the runtime started
            self.start_loop()

    def start_loop(self) -> None:
        if self._run_task is None and not self._stopped.is_set():
            self._run_task = asyncio.create_task(self._run())

    @property
    def loop_running(self) -> bool:
        return self._run_task is not None and not self._run_task.done()

    async def stop(self) -> None:
        self._stopped.set()
        if not self.left_clean():  # else nothing waits on the queue, nothing is in it: it serves the next run
            self._runtime._message_queue.shutdown(immediate=True)  # type: ignore[attr-defined]
        await self._end_loop()

    def left_clean(self) -> bool:
        """No message loop was started, and the queue holds nothing and counts no unfinished handler:
        the queue is as a new one (a message put on it after the stop waits for the next run, as on the
        new queue the stock runtime makes when it stops)."""
        queue: Any = self._runtime._message_queue
        return self._run_task is None and not queue._is_shutdown and not queue._queue and queue._unfinished_tasks == 0

    async def stop_when_idle(self) -> None:
        await self._runtime._message_queue.join()
        await self.stop()

    async def _end_loop(self) -> None:
        if self._run_task is not None:
            await self._run_task  # raises what the loop raised, a handler's failure among it
            return
        failure = self._runtime._background_exception
        if failure is not None:  # as the loop raises it when its queue shuts down
            self._runtime._background_exception = None
            raise failure


class MessageQueue(LinesMadeOnUse, Queue[Any]):
    """The lean runtime's message queue: a message put on it starts the runtime's message loop."""

    def __init__(self, runtime: SingleThreadedAgentRuntime) -> None:
        super().__init__()
        self._lines_made_on_use()
        self._runtime = runtime

    async def get(self) -> Any:
        self._getters_line()
        return await super().get()

    def _put(self, item: Any) -> None:
        super()._put(item)
        run_context = self._runtime._run_context
        if run_context is not None:
            run_context.start_loop()  # type: ignore[attr-defined]


def new_message_queue(runtime: SingleThreadedAgentRuntime) -> asyncio.Queue[Any]:
    """A lean runtime's message queue, made when the runtime is and again each time it stops."""
    queue: MessageQueue = lighten_queue(MessageQueue(runtime))
    # autogen-core annotates the runtime's queue as asyncio's; below Python 3.13 it is its own copy, which this extends.
    return queue  # type: ignore[return-value]
