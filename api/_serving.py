"""The request flow every protocol shares: a request in, the duet's events out as a stream or one body.

One flow, whatever the protocol: refusals that cost nothing (full, shutting down, not JSON, too
large) → the bounded body read → the protocol's reader (validation: a 400 naming the param, before
any model call) → the pipeline (404) → the run, with a disconnect watcher and a cancellation token →
the protocol's stream writer (over :class:`~duet.api._sse.EventStreamResponse`) or its collected body.
Gate, limits, disconnects, the shutdown drain and the write timeout live here and in
:mod:`duet.api._sse`, once.

A protocol is a :class:`WireProtocol`: a reader (body → :class:`~duet.agents.DuetRequest`, in a
:class:`WireRequest`, its protocol's envelope), two writers over the
:class:`~duet.api._rendering.Renderer`'s parts (the stream's bytes, the collected body) and its error
shapes (an :class:`~duet.api._errors.APIError` as an HTTP response before the stream, as one event after
it starts; its keep-alive bytes). Chat Completions is :mod:`duet.api.chat._service`; the Responses API
:mod:`duet.api.responses`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Generic, Iterable, Mapping, Protocol, TypeVar

from autogen_core import CancellationToken
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from duet.agents import (
    Duet,
    DuetEvent,
    DuetRequest,
    DuetStream,
    Failed,
    Finished,
    ReasoningOutput,
    ReusedReasoning,
    RunToken,
    Usage,
    random_id,
)
from duet.agents.continuations import DEFAULT_OWNER
from duet.api._errors import APIError, as_api_error
from duet.api._limits import RequestGate, is_json, shutting_down
from duet.api.observability import RequestObservation, current_observation
from duet.api._wire import Model, ModelList
from duet.api._rendering import Renderer, ResponseWriter
from duet.api._settings import ServiceOptions
from duet.api._sse import PING, CLIENT_GONE, DirectWrites, EventStreamResponse, TimedWriteResponse, watch_disconnect
from duet.api._validation import LARGE_BODY_BYTES, load_body


@dataclass(slots=True, eq=False)
class WireRequest:
    """A request as the flow serves it, whatever protocol it came in: the
    :class:`~duet.agents.DuetRequest` its run gets (conversation, client tools, answer options, user,
    owner, and the response's id as the run's request id), in the envelope its protocol's writers read:
    the model name the client asked for, streamed or not, and what the protocol keeps between reading
    and writing. ``wire`` is the protocol's own parsed request, for its writers."""

    run_request: DuetRequest
    model: str
    stream: bool
    legacy: bool = False  # a Chat Completions ``functions`` client: one ``function_call``, finish reason ``function_call``
    wire: Any = None
    state: dict[str, Any] = field(default_factory=dict)  # what the protocol keeps between reading and writing
    unsaved: list[str] = field(default_factory=list)
    """What the response should have kept in the store and could not (the store was down): named in
    the :data:`UNSAVED_HEADER` of a collected response."""

    @property
    def response_id(self) -> str:
        return self.run_request.request_id or ""


UNSAVED_HEADER = "duet-unsaved"
"""A collected response's header naming what could not be kept while the store was down, comma-separated:
``response`` (a Responses API response: its body says ``store: false``), ``tool_round`` (the hidden
part of its client tool round: the follow-up goes on without it)."""


class StreamWriter(ResponseWriter, Protocol):
    """A protocol's streamed response: the parts as framed bytes, handed over by :meth:`take`."""

    def take(self) -> bytes:
        """What was written since the last call (``b""`` if nothing)."""


class CollectedWriter(ResponseWriter, Protocol):
    """A protocol's collected response: :meth:`result` is the body the parts make, or the error that ended the run."""

    def result(self) -> BaseModel | APIError: ...


class Parsed(Protocol):
    """What a protocol's reader makes of a body: at least the pipeline it asks for (an attribute: read
    on every request's way)."""

    @property
    def model(self) -> str: ...  # read-only: a reader's NamedTuple field


P = TypeVar("P", bound=Parsed)


class WireProtocol(Generic[P]):
    """One API protocol on the shared flow. Subclasses implement :meth:`parse`, :meth:`prepare`,
    :meth:`stream_writer` and :meth:`fold`; the error shapes default to OpenAI's."""

    id_prefix: str  # of the ids of its responses ("chatcmpl-", "resp_")
    keep_alive = PING
    """Bytes written to a stream that was quiet for ``ping_interval``."""

    def parse(self, raw: bytes, options: ServiceOptions) -> P:
        """The body, validated: everything that can be refused without a model is refused here (400)."""
        raise NotImplementedError

    async def prepare(self, parsed: P, duet: Duet, owner: str) -> WireRequest:
        """The run the parsed request asks of ``duet``: its :class:`~duet.agents.DuetRequest` (request id:
        :func:`new_response_id`), in this protocol's envelope. 400s that need the pipeline's tools are raised
        here; ``owner``: whose stored state it may read (its API key's)."""
        raise NotImplementedError

    def stream_writer(self, request: WireRequest, response_id: str) -> StreamWriter:
        raise NotImplementedError

    def fold(self, request: WireRequest, response_id: str) -> CollectedWriter:
        raise NotImplementedError

    async def completed(self, request: WireRequest, writer: ResponseWriter) -> None:
        """Called once the run's last event is rendered, before the stream's last bytes or the
        collected body are written (the Responses API stores the response here). Bounded by the caller's store timeout."""

    def reasoning_output(self, configured: ReasoningOutput) -> ReasoningOutput:
        """How this protocol shows reasoning, given the pipeline's ``reasoning_output``: as configured,
        unless the protocol has a place of its own for reasoning."""
        return configured

    def error_response(self, error: APIError, headers: dict[str, str] | None = None) -> Response:
        """An error before the stream began (or instead of a body): the HTTP status and this protocol's body."""
        return error.response(headers=headers)


def new_response_id(prefix: str) -> str:
    """A new response id in a protocol's form (``chatcmpl-…``: ``prefix``); the run goes by it too."""
    return f"{prefix}{random_id()}"


M = TypeVar("M", bound=BaseModel)


def validated_body(raw: bytes, model: type[M], limits: Iterable[tuple[str, int]]) -> tuple[M, dict[str, Any]]:
    """A protocol's request: the body parsed (strict JSON, bounded depth), each list named in ``limits``
    counted before any model is built (a body of 200,000 messages is refused, not converted), then
    validated by ``model``. Every refusal is a 400 naming the param; the body as parsed comes back too
    (tool schemas are passed on from it untouched: a pydantic dump would drop ``null`` values)."""
    body = load_body(raw)
    for name, limit in limits:
        items = body.get(name)
        if isinstance(items, list) and len(items) > limit:
            raise APIError(400, f"{name}: at most {limit} are allowed, got {len(items)}", param=name, code="too_many_items")
    try:
        return model.model_validate(body), body
    except ValidationError as exc:
        raise invalid_request(exc, body) from None


def invalid_request(exc: ValidationError, body: Any) -> APIError:
    """A request model's validation error as a 400 naming the first param at fault."""
    errors = exc.errors(include_url=False, include_input=False)
    param = param_of(errors[0], body)
    # A union (``stop``: a string or a list) reports one error per alternative: say them all.
    reasons = list(dict.fromkeys(e["msg"] for e in errors if param_of(e, body) == param))
    message = " or ".join(reasons)
    return APIError(400, f"{param}: {message}" if param else message, param=param, code="invalid_request")


def param_of(error: Any, body: Any) -> str | None:
    """The error's place in the body (``tools.0.function.name``), without the names pydantic adds
    for the alternatives of a union (``stop.list[str]``), which are not in the body."""
    parts: list[str] = []
    value = body
    loc = error["loc"]
    for index, part in enumerate(loc):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        elif not (error["type"] == "missing" and index == len(loc) - 1):
            continue
        parts.append(str(part))
    return ".".join(parts)[:200] or None


REQUEST_OUT_WAIT = 0.05
"""Seconds at most that making a response waits for its run's first model request to go out (a run
whose first step is not a model call, or a slow connection, gets its response made after this)."""


class Service:
    """Serves the pipelines by name, in every protocol. Knows HTTP; knows nothing of model clients.
    A request's ``owner`` (:meth:`~duet.api._auth.BearerAuth.owner_of`) is whose stored state its run reads and writes."""

    def __init__(self, pipelines: Mapping[str, Duet], options: ServiceOptions | None = None, gate: RequestGate | None = None) -> None:
        self.pipelines = dict(pipelines)
        self.options = options or ServiceOptions()
        self.gate = gate or RequestGate(self.options)
        self.ping_interval = self.options.ping_interval
        self.created = int(time.time())
        self.in_flight = 0

    def model_list(self) -> ModelList:
        return ModelList(data=[Model(id=name, created=self.created) for name in self.pipelines])

    def pipeline(self, name: str) -> Duet:
        """The pipeline served as ``name`` (or that ``model_aliases`` maps it to); 404 naming those served otherwise."""
        duet = self.pipelines.get(name)
        if duet is None and (aliased := self.options.aliased(name)) is not None:  # model_aliases: a name a client insists on
            duet = self.pipelines.get(aliased)
        if duet is None:
            raise APIError(404, f"The model '{name}' does not exist; this server serves: {', '.join(self.pipelines)}",
                           param="model", code="model_not_found")
        return duet

    async def create(self, request: Request, protocol: WireProtocol[Any], owner: str = DEFAULT_OWNER) -> Response:
        """Serves one request of ``protocol`` for ``owner``: admitted (nothing read yet), its body read and
        parsed, admitted again (reading a body is not running a completion), its pipeline found, the
        protocol's reader makes the run's request, the run starts; then the stream, or the collected body."""
        gate = self.gate
        gate.admit(self.in_flight + gate.starting)
        parsed = await self._read(request, protocol)
        gate.starting += 1  # from here on the request counts toward the cap
        try:
            duet, observation = self._pipeline_of(parsed)
            wire_request = await protocol.prepare(parsed, duet, owner)
            started = await self._start(request, duet, wire_request, observation)
            if started is None:  # the client left before its run's first model request went out
                return Response(status_code=499)
            run, disconnected, token = started
            if wire_request.stream:
                return self._event_stream(protocol, duet, wire_request, run, disconnected)
            source = _EventSource(self, run, protocol, wire_request)
        finally:
            gate.starting -= 1
        return await self._collected(protocol, wire_request, duet, source, disconnected, token)

    async def _read(self, request: Request, protocol: WireProtocol[P]) -> P:
        """The body, read within the gate's bounds and held against its byte budget until the protocol
        has parsed it (a refusal leaves the rest unread: the server skips it, for at most body_timeout,
        api/server/_server.py); a large body is parsed in a worker thread, and the event loop goes on
        serving others. Only JSON is read: also what keeps a web page from posting here cross-site
        (browsers send JSON only after a CORS preflight). Reading a body is not running a completion:
        once it is read, the request is admitted again (the cap may have filled meanwhile)."""
        if not is_json(request.headers.get("content-type")):
            raise APIError(415, "the request body must be JSON, sent with 'Content-Type: application/json'",
                           param="Content-Type", code="unsupported_media_type")
        async with self.gate.body(request) as raw:
            if len(raw) > LARGE_BODY_BYTES:
                parsed = await asyncio.to_thread(protocol.parse, raw, self.options)
            else:
                parsed = protocol.parse(raw, self.options)
        self.gate.admit(self.in_flight + self.gate.starting)
        return parsed

    def _pipeline_of(self, parsed: Parsed) -> tuple[Duet, RequestObservation | None]:
        """The pipeline the request names (404 otherwise), and the request's observation (the run
        reports to it; the request's log line names the pipeline)."""
        duet = self.pipeline(parsed.model)
        observation = current_observation()
        if observation is not None:
            observation.pipeline = duet.name
        return duet, observation

    async def _start(self, request: Request, duet: Duet, wire_request: WireRequest,
                     observation: RequestObservation | None) -> tuple[DuetStream, asyncio.Future[None], RunToken] | None:
        """Starts the run, and takes its first steps until its first model request is written (at most
        :data:`REQUEST_OUT_WAIT`): the response is made after, while the model works, not on the
        request's way out. ``None`` (the run closed) if the client left meanwhile.

        The disconnect watcher is live before the run exists, and cancels the run's token itself as the
        server reads the hang-up; a hang-up the server has not read yet is found by the token's question
        (the model clients ask it as each request goes out): a client that leaves before a model call
        starts never costs one."""
        if observation is not None:
            observation.stream = wire_request.stream
        token = RunToken(caller_gone=request.scope.get(CLIENT_GONE))
        disconnected = watch_disconnect(request.scope, request.receive, then=token.cancel)
        try:
            run = duet.start(wire_request.run_request, cancellation_token=token, observer=observation)
        except BaseException:
            disconnected.cancel()
            raise
        try:
            await run.request_out(REQUEST_OUT_WAIT)
        except BaseException:  # the request's task is cancelled (a forced shutdown): stop the run too
            disconnected.cancel()
            await run.close()
            raise
        if disconnected.done():
            await run.close()
            return None
        return run, disconnected, token

    def _event_stream(self, protocol: WireProtocol[Any], duet: Duet, wire_request: WireRequest, run: DuetStream,
                      disconnected: asyncio.Future[None]) -> EventStreamResponse:
        """The streamed response: the run's events rendered by the protocol's stream writer (its opening
        now: it leaves with the first events)."""
        writer = protocol.stream_writer(wire_request, wire_request.response_id)
        renderer = Renderer(writer, protocol.reasoning_output(duet.reasoning_output), wire_request.legacy)
        renderer.start()
        source = _EventSource(self, run, protocol, wire_request, renderer, writer, first_wait=self.ping_interval)
        response = EventStreamResponse(source, ping_interval=self.ping_interval, write_timeout=self.options.write_timeout,
                                       disconnected=disconnected, stopped=self.gate.stopped)
        source.starter = response  # let go when the source closes (no cycle outlives the request)
        return response

    async def _collected(
        self,
        protocol: WireProtocol[Any],
        wire_request: WireRequest,
        duet: Duet,
        source: "_EventSource",
        disconnected: asyncio.Future[None],
        token: CancellationToken,
    ) -> Response:
        events = await _collect_unless(source, disconnected, self.gate.stopped, token)
        if not isinstance(events, list):  # the client hung up or the server stops: the models were stopped
            if events is disconnected:
                return Response(status_code=499)
            return protocol.error_response(shutting_down(), headers={"connection": "close"})
        fold = protocol.fold(wire_request, wire_request.response_id)
        renderer = Renderer(fold, protocol.reasoning_output(duet.reasoning_output), wire_request.legacy)
        renderer.start()
        for event in events:
            renderer.render(event)
        if events and isinstance(events[-1], Finished) and events[-1].hidden_part_lost:
            wire_request.unsaved.append("tool_round")
        await protocol.completed(wire_request, fold)
        result = fold.result()
        if isinstance(result, APIError):
            return protocol.error_response(result)
        headers = {UNSAVED_HEADER: ", ".join(wire_request.unsaved)} if wire_request.unsaved else None
        return TimedWriteResponse(JSONResponse(result.model_dump(mode="json"), headers=headers), self.options.write_timeout)


async def _collect_unless(source: "_EventSource", disconnected: asyncio.Future[None], stopped: asyncio.Future[None],
                          token: CancellationToken) -> list[DuetEvent] | asyncio.Future[None]:
    """The run's events, collected in the request's own task; or, once the client has gone or the server
    stops first, which of ``disconnected`` and ``stopped`` it was (their callbacks cancel the collecting,
    as they interrupt a stream's writing; no task and no ``asyncio.wait`` of its own). The source is
    closed either way, which stops whatever of the run still goes on."""
    task = asyncio.current_task()
    assert task is not None
    interrupted: list[asyncio.Future[None]] = []  # the future that cancelled the collecting, if one did

    def interrupt(future: asyncio.Future[None]) -> None:
        if not interrupted and collecting:
            interrupted.append(future)
            task.cancel()

    collecting = True
    disconnected.add_done_callback(interrupt)
    stopped.add_done_callback(interrupt)
    events: list[DuetEvent] | None = None
    try:
        try:
            events = await source.collect()
        finally:
            collecting = False  # at once: no interruption from here on
    except asyncio.CancelledError:
        if not interrupted or task.uncancel():
            raise  # not (only) ours: the server ends every request
    finally:
        stopped.remove_done_callback(interrupt)  # the server's stop signal outlives the request
        disconnected.cancel()
        try:
            if events is None:  # the client hung up, the server stops, or the run could not be read: stop the models
                token.cancel()
        finally:
            await source.close()
    return interrupted[0] if events is None else events


_HELD_BACK = (ReusedReasoning, Usage)
"""Events the status line is held back past: what a retry reuses of its first attempt, instantly."""


class _EventSource:
    """One request's run as an :class:`~duet.api._sse.EventSource`. Closed exactly once however the
    response ends (finished, failed, client gone, never started), which stops the duet's model
    calls if they still run."""

    def __init__(
        self,
        service: Service,
        run: DuetStream,
        protocol: WireProtocol[Any],
        request: WireRequest,
        renderer: Renderer | None = None,
        writer: StreamWriter | None = None,
        first_wait: float = 5.0,
    ) -> None:
        """``renderer`` (writing to ``writer``) and ``first_wait`` serve a streamed response; a collected one needs none."""
        self._service = service
        self._run = run
        self._protocol = protocol
        self._request = request
        self._renderer = renderer
        self._writer = writer
        self.first_wait = first_wait
        self.keep_alive = protocol.keep_alive
        self._first: list[DuetEvent] | None = []  # the first batch, until the first chunk is made of it (then None)
        self._unsent = b""  # the first event's bytes, rendered, not sent when the source began the stream (begin)
        self._closed = False
        self.starter: EventStreamResponse | None = None
        """The streamed response, which may be begun in the step of the agent that emits the first event."""
        service.in_flight += 1

    async def start(self) -> Response | None:
        # Hold the status line back until the duet's first event, so failures that come fast (a
        # bad upstream key, an unreachable server) get a real HTTP status. A slow start is
        # committed after one ping interval: the client then sees keep-alives, not nothing.
        # Reasoning a retry reuses costs no wait: the status is held back past it, so a retry whose
        # answer model fails again gets the real status (a 429 with its Retry-After), not a 200.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.first_wait
        first = await self._run.next_batch(timeout=self.first_wait, deliver=self._first_through())
        while first and all(type(event) in _HELD_BACK for event in first) and not self._run.ended:
            more = await self._run.next_batch(timeout=max(0.0, deadline - loop.time()))
            if not more:
                break
            first += more
        self._first = first
        failure = next((event for event in first if type(event) not in _HELD_BACK), None)
        # A run that failed in the step its first event began the stream in (:meth:`_first_through`): the
        # status line is out, so the failure is the stream's error event, not a second status line.
        begun = self.starter is not None and self.starter.started
        if isinstance(failure, Failed) and not begun:
            return self._protocol.error_response(as_api_error(failure.error))
        return None

    def _first_through(self) -> Callable[[DuetEvent], bool] | None:
        """What takes the run's first event while the stream waits for it: rendered and written with the
        status line at once, in the emitting agent's step, when the client's connection takes them now
        (:meth:`EventStreamResponse.begin`); then the stream's task is woken to go on writing. Never an
        event the status line is held back past (nor the end: the run's channel offers it to nobody)."""
        starter, renderer, writer, run = self.starter, self._renderer, self._writer, self._run
        if starter is None or renderer is None or writer is None:
            return None

        def deliver(event: DuetEvent) -> bool:
            if type(event) in _HELD_BACK or not starter.startable():
                return False
            renderer.render(event)
            self._unsent = starter.begin(writer.take())  # what a send that would have waited left to the stream's task
            run.wake()
            return True

        return deliver

    def error_response(self, error: APIError, headers: dict[str, str] | None = None) -> Response:
        return self._protocol.error_response(error, headers=headers)

    def error_event(self, error: APIError) -> bytes:
        """The stream's end with one error event (the server stops): what the writer still held, then the event."""
        assert self._writer is not None
        self._writer.error(error)
        return self._writer.take()

    async def collect(self) -> list[DuetEvent]:
        """The run's events, a batch at a time (not a ``__anext__`` and a ``pop(0)`` an event)."""
        run = self._run
        events: list[DuetEvent] = []
        while not run.ended:
            events += await run.next_batch()
        return events

    async def chunks(self, direct: DirectWrites | None = None) -> AsyncIterator[bytes]:
        """The stream's chunks: the first batch's bytes (after what :meth:`start`'s ``begin`` left unsent),
        then each batch's once it comes. An async generator: a class-based iterator here (one coroutine per
        chunk, the source its own iterator) kept ~10 KB more per open stream in RSS at 500 streams
        (bench/open_streams.py, five runs each way; not explained yet)."""
        assert self._renderer is not None and self._writer is not None
        render, take = self._renderer.render, self._writer.take
        event: DuetEvent | None
        for event in self._first or ():
            render(event)
        # Rendered: neither the first batch nor the last event is kept while the stream waits for the next.
        self._first = None
        event = None
        if self._run.ended:
            await self._protocol.completed(self._request, self._writer)
        unsent, self._unsent = self._unsent, b""
        yield unsent + take() if unsent else take()
        deliver = None if direct is None else self._writing_through(direct)
        while not self._run.ended:
            for event in await self._run.next_batch(deliver=deliver):
                render(event)
            event = None
            if self._run.ended:
                await self._protocol.completed(self._request, self._writer)
            yield take()

    def _writing_through(self, direct: DirectWrites) -> Callable[[DuetEvent], bool]:
        """What takes an event while the stream waits for the next: rendered and written at once, in the
        emitting agent's step, when the client's connection takes it now (else the event is queued)."""
        render, take, writable, write = self._renderer.render, self._writer.take, direct.writable, direct.write  # type: ignore[union-attr]

        def deliver(event: DuetEvent) -> bool:
            if not writable():
                return False
            render(event)
            data = take()
            if data:
                write(data)
            return True

        return deliver

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.starter = None
        self._service.in_flight -= 1
        await self._run.close()
