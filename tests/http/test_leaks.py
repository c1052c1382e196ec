"""A request's objects die with it: hang-ups at every point of a request, in every protocol, leave
nothing behind.

Duet is served by uvicorn on a thread of the test process (real HTTP on 127.0.0.1, the scripted
upstream on another thread), so the test can collect garbage and count what is still alive.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import threading
import time
from typing import Iterator

import aiohttp
import httpx
import pytest
import uvicorn

from duet.agents import AnswerSettings, ContentDelta, Duet, PipelineSettings, ReasonerSettings
from duet.api._app import ServiceConfig, create_app
from duet.api.server._process import configure_process, freeze_startup_objects
from duet.api.server._server import protocol_for
from duet.api._settings import ServiceOptions
from tests.aborts import ABORT_POINTS, abort_many, abort_responder
from tests.conftest import free_port, wait_for_port
from tests.scripted_upstream import Reply, ScriptedUpstream
from duet.workbenches import ToolsSettings

KEY = "leak-key"

# Objects that belong to one request; none may survive it (a few pooled, idle teams aside).
REQUEST_TYPES = (
    "DuetRun", "DuetStream", "_EventSource", "EventChannel", "CancellationToken", "HandoffMessage", "TextMessage",
    "UserMessage", "SystemMessage", "DuetWorkbench", "ProxyTool", "RoundRobinGroupChat", "LeanAgentRuntime",
    "ReasoningAgent", "AnswerAgent", "ClientResponse", "StreamReader", "Task", "Failed",
)


class InProcessDuet:
    """``create_app`` served by uvicorn on a background thread of this process, set up as ``duet
    serve`` sets up its own process (:meth:`stop` puts the garbage collector back)."""

    def __init__(self, config: ServiceConfig) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._gc_threshold = gc.get_threshold()
        configure_process()
        app = create_app(config)
        # The edge's protocol, as duet serve runs it (its disconnect watcher, its kernel probe).
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", lifespan="on",
                                                    http=protocol_for(config.options)))
        self.thread = threading.Thread(target=self.server.run, name="duet-in-process", daemon=True)
        self.thread.start()
        wait_for_port(self.port)
        freeze_startup_objects()  # once started, as duet serve's server does

    def health(self) -> dict[str, int]:
        """The keyed readiness details (in flight, tasks)."""
        return httpx.get(f"{self.base_url}/health/ready", headers={"Authorization": f"Bearer {KEY}"}, timeout=5).json()  # type: ignore[no-any-return]

    def settle(self, baseline_tasks: int, timeout: float = 20) -> None:
        """Until no request is in flight and the server's tasks are back to ``baseline_tasks``."""
        deadline = time.monotonic() + timeout
        health = self.health()
        while (health["in_flight"] or health["tasks"] > baseline_tasks) and time.monotonic() < deadline:
            time.sleep(0.1)
            health = self.health()
        assert health["in_flight"] == 0 and health["tasks"] <= baseline_tasks, health

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        gc.unfreeze()  # freeze_startup_objects froze this whole process's objects
        gc.set_threshold(*self._gc_threshold)


class _TracebacksAsText(logging.Filter):
    """pytest keeps the log records of a test until it ends, and a record's ``exc_info`` holds a
    traceback whose frames hold a request: keep the text, drop the frames (or the test would count
    what pytest holds)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            record.exc_text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return True


@pytest.fixture
def served() -> Iterator[tuple[InProcessDuet, ScriptedUpstream]]:
    handlers = list(logging.getLogger().handlers)
    as_text = _TracebacksAsText()
    for handler in handlers:
        handler.addFilter(as_text)
    with ScriptedUpstream(responder=abort_responder) as upstream:
        pipeline = PipelineSettings(
            name="duet",
            # The same requests a thousand times: each must reach the reasoner (no reuse of an earlier reasoning).
            reasoner=ReasonerSettings(base_url=upstream.base_url, model="abort-r1", reuse_seconds=0),
            answer=AnswerSettings(base_url=upstream.base_url, model="abort-answer"),
            tools=ToolsSettings(functions=["tests.aborts:slow_lookup"]),  # type: ignore[list-item]
        )
        duet = InProcessDuet(ServiceConfig([pipeline], api_keys=[KEY], options=ServiceOptions(ping_interval=0.5)))
        try:
            yield duet, upstream
        finally:
            duet.stop()
            for handler in handlers:
                handler.removeFilter(as_text)


def census() -> collections.Counter[str]:
    """Live objects by type name after a full collection, and their total."""
    gc.collect()
    objects = gc.get_objects()
    counts = collections.Counter(type(o).__name__ for o in objects)
    counts["(total)"] = len(objects)
    del objects
    return counts


def growth(before: collections.Counter[str], after: collections.Counter[str]) -> dict[str, int]:
    names = ("(total)", "frame", "traceback", "coroutine", *REQUEST_TYPES)
    return {name: after[name] - before[name] for name in names if after[name] != before[name]}


@pytest.mark.parametrize(("protocol", "count"), [("chat", 1000), ("responses", 500), ("messages", 500)])
def test_a_thousand_hang_ups_leave_nothing_behind(served: tuple[InProcessDuet, ScriptedUpstream], protocol: str, count: int) -> None:
    duet, upstream = served
    baseline_tasks = duet.health()["tasks"]
    # Warm up: every code path runs once, caches fill, the team pool holds what it keeps.
    asyncio.run(abort_many(duet.port, "duet", 100, KEY, protocol=protocol))
    duet.settle(baseline_tasks)
    upstream.requests.clear()
    before = census()

    asyncio.run(abort_many(duet.port, "duet", count, KEY, protocol=protocol))
    duet.settle(baseline_tasks)
    assert len(upstream.requests) >= count * 4 // len(ABORT_POINTS)  # the hang-ups did reach the upstream
    upstream.requests.clear()
    after = census()

    grown = growth(before, after)
    print(f"growth over {count} hang-ups ({protocol}):", grown)
    # Bounded, not proportional to the hang-ups: a leak of one object per hang-up is one per hang-up.
    assert grown.get("frame", 0) < 20 and grown.get("traceback", 0) < 20, grown
    assert all(grown.get(name, 0) < 50 for name in REQUEST_TYPES), grown
    assert grown.get("(total)", 0) < 3000, grown


def test_a_finished_stage_leaves_nothing_for_the_rest_of_the_run() -> None:
    """While the answer streams, the reasoner's upstream response (and all that hangs on it) is
    already gone: an open stream holds what its current stage needs, not what its run has done."""

    async def responses_while_answering(base_url: str) -> int:
        settings = PipelineSettings(reasoner=ReasonerSettings(base_url=base_url, model="r1"),
                                    answer=AnswerSettings(base_url=base_url, model="answer"))
        async with Duet.from_settings(settings) as duet:
            stream = duet.start([{"role": "user", "content": "Plan a picnic."}])
            try:
                async for event in stream:
                    if isinstance(event, ContentDelta):
                        gc.collect()
                        return sum(isinstance(o, aiohttp.ClientResponse) for o in gc.get_objects())
            finally:
                await stream.close()
        raise AssertionError("the answer never streamed")

    with ScriptedUpstream() as upstream:
        upstream.script("r1", Reply(reasoning=["Sandwiches, ", "fruit."], delay_between=0.05))
        upstream.script("answer", Reply(content=["Bring ", "sandwiches ", "and ", "fruit."], delay_between=0.05))
        assert asyncio.run(responses_while_answering(upstream.base_url)) == 1  # the answer's own
