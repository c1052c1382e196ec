"""The replay upstream: one real HTTP server on 127.0.0.1 that speaks every replayed dialect.

The dialect is chosen by the first segment of the path (``base_url("vllm")`` is
``http://127.0.0.1:PORT/vllm/v1``; Gemini's own ``/v1beta/openai`` tail works too), or, on a bare
path, by a ``<dialect>/`` prefix of the model name (stripped before the dialect sees it). It serves
``POST …/chat/completions`` (streamed, one SSE event per write, ``pace`` seconds apart, or not) and
``GET …/models``. It records every request, and refuses a request the way the real server does
(a model it does not serve, a follow-up that lacks the ids, signatures or reasoning it issued).

Like :class:`tests.scripted_upstream.ScriptedUpstream`, it runs its own event loop in a background
thread, so synchronous clients and the service under test can share it::

    with ReplayUpstream() as upstream:
        upstream.script("mistral", Scenario.tool_call())
        client = OpenAI(base_url=upstream.base_url("mistral"), api_key="x")
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .dialect import ABORT, Dialect, HttpError, Ledger, Reply
from .dialects import DIALECTS
from .scenario import Failure, Scenario, default_scenario

PACE = 0.002
"""Seconds between two writes of a stream: each event leaves in its own write."""


@dataclass
class RecordedRequest:
    dialect: str
    path: str
    model: str
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    status: int = 200
    refusal: HttpError | None = None  # the server refused it (the body it answered with)
    aborted: bool = False  # the client hung up, or the scenario dropped the connection
    ended: threading.Event = field(default_factory=threading.Event)


class ReplayUpstream:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, pace: float = PACE) -> None:
        self._host, self._port, self.pace = host, port, pace
        self._lock = threading.Lock()
        self._scripts: dict[str, collections.deque[Scenario]] = collections.defaultdict(collections.deque)
        self._served: dict[str, list[str]] = {name: list(d.default_models) for name, d in DIALECTS.items()}
        self.ledgers: dict[str, Ledger] = collections.defaultdict(Ledger)
        self.requests: list[RecordedRequest] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- scripting -------------------------------------------------------------------------------
    def base_url(self, dialect: str) -> str:
        return f"http://{self._host}:{self.port}/{dialect}/v1"

    def script(self, dialect: str, *scenarios: Scenario) -> None:
        """Queues scenarios for ``dialect``, played in order; then the default scenario answers."""
        with self._lock:
            self._scripts[dialect].extend(scenarios)

    def serve(self, dialect: str, *models: str) -> None:
        with self._lock:
            self._served[dialect].extend(m for m in models if m not in self._served[dialect])

    def unserve(self, dialect: str, *models: str) -> None:
        """The model is no longer there (Ollama: not pulled)."""
        with self._lock:
            self._served[dialect] = [m for m in self._served[dialect] if m not in models]

    def requests_for(self, dialect: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.dialect == dialect]

    def reset(self) -> None:
        with self._lock:
            self._scripts.clear()
            self.requests.clear()
            self.ledgers.clear()
            self._served = {name: list(d.default_models) for name, d in DIALECTS.items()}

    def _next_scenario(self, dialect: str) -> Scenario | None:
        with self._lock:
            queue = self._scripts.get(dialect)
            return queue.popleft() if queue else None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "ReplayUpstream":
        started = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self._host, self._port)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="replay-upstream", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the replay upstream did not start")
        return self

    def stop(self) -> None:
        if self._loop is None or self._runner is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)

    def __enter__(self) -> "ReplayUpstream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP ------------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        segments = request.path.strip("/").split("/")
        dialect_name = segments[0] if segments[0] in DIALECTS else None
        if request.method == "GET" and request.path.endswith("/models") and dialect_name:
            with self._lock:
                served = list(self._served[dialect_name])
            return web.json_response(DIALECTS[dialect_name].models(served))
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            return web.json_response({"error": {"message": f"no route for {request.method} {request.path}"}}, status=404)
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response({"error": {"message": "the body is not JSON", "type": "invalid_request_error"}}, status=400)
        model = str(body.get("model", ""))
        if dialect_name is None and model.split("/", 1)[0] in DIALECTS:
            dialect_name, model = model.split("/", 1)
            body = {**body, "model": model}
        if dialect_name is None:
            return web.json_response({"error": {"message": "no dialect in the path or the model name"}}, status=404)
        record = RecordedRequest(dialect_name, request.path, model, body, dict(request.headers), time.monotonic())
        self.requests.append(record)
        try:
            return await self._chat(request, DIALECTS[dialect_name], record)
        finally:
            record.ended.set()

    async def _chat(self, request: web.Request, dialect: Dialect, record: RecordedRequest) -> web.StreamResponse:
        body, model, ledger = record.body, record.model, self.ledgers[dialect.name]
        with self._lock:
            served = set(self._served[dialect.name])
        if not dialect.serves(model, served):
            return self._refuse(record, dialect.error(Failure("model_not_found"), model))
        refusal = dialect.refusal(body, ledger)
        if refusal is not None:  # refused before it could play anything: the script waits
            return self._refuse(record, refusal)
        scenario = self._next_scenario(dialect.name) or default_scenario(body, dialect.thinks(model, body))
        failure = scenario.failure
        if failure and failure.kind != "mid_stream":
            return self._refuse(record, dialect.error(failure, model))
        reply = dialect.new_reply(body, model, scenario.turn, ledger)
        if not body.get("stream"):
            return web.json_response(dialect.completion(reply), dumps=lambda o: json.dumps(o, ensure_ascii=False))
        after = failure.after if failure else None
        return await self._stream(request, dialect, reply, record, after)

    @staticmethod
    def _refuse(record: RecordedRequest, error: HttpError) -> web.Response:
        record.status, record.refusal = error.status, error
        return web.Response(status=error.status, body=error.body, content_type=error.content_type, headers=error.headers)

    async def _stream(
        self, request: web.Request, dialect: Dialect, reply: Reply, record: RecordedRequest, fail_after: int | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        writes = dialect.stream(reply)
        for sent, item in enumerate(writes):
            if fail_after is not None and sent == fail_after:
                writes = dialect.mid_stream_failure(reply)
                break
            if not await self._write(request, response, item, record):
                return response
        else:
            writes = iter(())
        for item in writes:  # the failure's own writes
            if not await self._write(request, response, item, record):
                return response
        try:
            await response.write_eof()
        except ConnectionError:  # the client closed once it had read [DONE]
            pass
        return response

    async def _write(self, request: web.Request, response: web.StreamResponse, item: object, record: RecordedRequest) -> bool:
        """One write of the stream, then the pace; False once the stream is over (dropped or hung up)."""
        if item is ABORT:
            record.aborted = True
            if request.transport is not None:
                request.transport.abort()
            return False
        try:
            await response.write(item)  # type: ignore[arg-type]
        except ConnectionError:
            record.aborted = True
            return False
        if self.pace:
            await asyncio.sleep(self.pace)
        return True
