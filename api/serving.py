"""``/v1/chat/completions``: an OpenAI request in, the duet's events out as chunks or one completion."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, AsyncIterator, Mapping

from autogen_core import CancellationToken
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from duet.agents import AnswerOptions, Duet, DuetEvent, DuetStream, Failed, conversation_from_openai
from duet.workbenches import ProxyTool, model_safe_name, proxy_tools_from_openai

from .chunks import ChunkEncoder, ChunkWriter
from .completion import CompletionFold
from .errors import APIError, as_api_error
from .limits import RETRY_AFTER_SECONDS, RequestGate, is_json, shutting_down
from .observability import current_observation
from .protocol import ANSWER_MODEL_FIELDS, ChatCompletionRequest, Model, ModelList, NamedFunction, NamedToolChoice, ResponseFormat
from .rendering import Renderer
from .settings import ServiceOptions
from .sse import EventStreamResponse, TimedWriteResponse, cancel_and_wait, wait_for_disconnect
from .validation import LARGE_BODY_BYTES, load_body


async def parse_request(raw: bytes, options: ServiceOptions) -> tuple[ChatCompletionRequest, dict[str, Any]]:
    """The validated request, and the body as parsed (tool schemas are passed on from it, untouched).
    Everything that can be refused without a model is refused here, with a 400 naming the param."""
    if len(raw) > LARGE_BODY_BYTES:  # parsed in a worker thread: the event loop goes on serving others
        return await asyncio.to_thread(_parse_request, raw, options)
    return _parse_request(raw, options)


def _parse_request(raw: bytes, options: ServiceOptions) -> tuple[ChatCompletionRequest, dict[str, Any]]:
    body = load_body(raw)
    # Counted before the models are built: a body of 200,000 messages is refused, not converted.
    for name, limit in (("messages", options.max_messages), ("tools", options.max_tools), ("functions", options.max_tools)):
        items = body.get(name)
        if isinstance(items, list) and len(items) > limit:
            raise APIError(400, f"{name}: at most {limit} are allowed, got {len(items)}", param=name, code="too_many_items")
    try:
        return ChatCompletionRequest.model_validate(body), body
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        param = _param_of(errors[0], body)
        # A union (``stop``: a string or a list) reports one error per alternative: say them all.
        reasons = list(dict.fromkeys(e["msg"] for e in errors if _param_of(e, body) == param))
        message = " or ".join(reasons)
        raise APIError(400, f"{param}: {message}" if param else message, param=param, code="invalid_request") from None


def _param_of(error: Any, body: Any) -> str | None:
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


def client_tools_of(request: ChatCompletionRequest, body: dict[str, Any]) -> list[ProxyTool]:
    """Proxy tools from the raw ``tools`` (or ``functions``) of the body: validated by the request
    model, but passed on as received (a pydantic dump would drop ``null`` values inside schemas)."""
    raw = body.get("tools") if request.tools is not None else body.get("functions")
    try:
        return proxy_tools_from_openai(raw or [])
    except ValueError as exc:
        raise APIError(400, str(exc), param="tools" if request.tools is not None else "functions") from None


def answer_options(request: ChatCompletionRequest, tools: list[ProxyTool], service_tool_names: set[str]) -> AnswerOptions:
    """The request's knobs for the answer model."""
    create_args: dict[str, Any] = {}
    for name in ANSWER_MODEL_FIELDS:
        value = getattr(request, name)
        if value is not None:
            create_args[name] = value.as_sent() if isinstance(value, ResponseFormat) else value
    has_tools = bool(tools or service_tool_names)
    if has_tools and request.parallel_tool_calls is not None:
        create_args["parallel_tool_calls"] = request.parallel_tool_calls
    if has_tools and request.legacy_functions:
        create_args["parallel_tool_calls"] = False

    # Legacy clients send functions and function_call; a client without tools may send either choice.
    legacy = request.tools is None and (request.functions is not None or request.tool_choice is None)
    if legacy and request.tool_choice not in (None, "auto"):  # it would be dropped: function_call decides here
        raise APIError(400, "tool_choice applies to tools; with functions, use function_call", param="tool_choice")
    choice = request.function_call if legacy else request.tool_choice
    param = "function_call" if legacy else "tool_choice"
    tool_choice = "auto"
    if isinstance(choice, str):
        if choice == "required" and not has_tools:
            raise APIError(400, f"{param} is 'required', but the request has no tools", param=param)
        tool_choice = choice
    elif isinstance(choice, (NamedToolChoice, NamedFunction)):
        name = choice.function.name if isinstance(choice, NamedToolChoice) else choice.name
        alias = model_safe_name(name)
        if alias not in {t.name for t in tools} | service_tool_names:
            raise APIError(400, f"{param} names '{name[:100]}', which is not among the tools", param=param)
        tool_choice = alias
    return AnswerOptions(tool_choice=tool_choice, create_args=create_args, single_tool_call=request.legacy_functions)


class ChatCompletionsService:
    """Serves the pipelines by name. Knows HTTP; knows nothing of model clients."""

    def __init__(self, pipelines: Mapping[str, Duet], options: ServiceOptions | None = None, gate: RequestGate | None = None) -> None:
        self.pipelines = dict(pipelines)
        self.options = options or ServiceOptions()
        self.gate = gate or RequestGate(self.options)
        self.ping_interval = self.options.ping_interval
        self.created = int(time.time())
        self.in_flight = 0

    def model_list(self) -> ModelList:
        return ModelList(data=[Model(id=name, created=self.created) for name in self.pipelines])

    async def create(self, request: Request) -> Response:
        # Refusals that cost nothing come first: full, shutting down, not JSON, too large.
        gate = self.gate
        refusal = gate.refusal(self.in_flight + gate.starting)
        if refusal is not None:
            return refusal.response(headers={"retry-after": RETRY_AFTER_SECONDS})
        if not is_json(request.headers.get("content-type")):
            # Also what keeps a web page from posting here cross-site: browsers send JSON only after a CORS preflight.
            raise APIError(415, "the request body must be JSON, sent with 'Content-Type: application/json'",
                           param="Content-Type", code="unsupported_media_type")
        # Held against the gate's byte budget until parsed. A refusal here leaves the rest of the body
        # unread: the server skips it, for at most body_timeout (api/server.py).
        async with gate.body(request) as raw:
            chat, body = await parse_request(raw, self.options)
        # Reading a body is not running a completion; from here on the request counts toward the cap.
        refusal = gate.refusal(self.in_flight + gate.starting)
        if refusal is not None:
            return refusal.response(headers={"retry-after": RETRY_AFTER_SECONDS})
        gate.starting += 1
        try:
            duet = self.pipelines.get(chat.model)
            if duet is None:
                raise APIError(
                    404,
                    f"The model '{chat.model}' does not exist; this server serves: {', '.join(self.pipelines)}",
                    param="model",
                    code="model_not_found",
                )
            observation = current_observation()  # the run reports to it; the request's log line names the pipeline
            if observation is not None:
                observation.pipeline, observation.stream = duet.name, chat.stream
            conversation = conversation_from_openai(chat.messages)
            tools = client_tools_of(chat, body)
            options = answer_options(chat, tools, duet.service_tool_names)
            # The disconnect watcher is live before the run exists, and cancels the run's token itself
            # (the model clients check it before each call): a client that leaves before a model call
            # starts never costs one. One turn of the loop lets it see a client that is gone already.
            token = CancellationToken()
            disconnected = asyncio.ensure_future(wait_for_disconnect(request.receive, then=token.cancel))
            await asyncio.sleep(0)
            if disconnected.done():
                return Response(status_code=499)
            completion_id = f"chatcmpl-{uuid.uuid4().hex}"
            try:
                # The duet starts now, while the response is still being returned.
                run = duet.start(conversation, tools=tools, options=options, request_id=completion_id, user=chat.user,
                                 cancellation_token=token, observer=observation)
            except BaseException:
                disconnected.cancel()
                raise
            if chat.stream:
                writer = ChunkWriter(ChunkEncoder(completion_id, int(time.time()), chat.model), chat.include_usage)
                renderer = Renderer(writer, duet.reasoning_output, chat.legacy_functions)
                source = _EventSource(self, run, renderer, writer, first_wait=self.ping_interval)
                return EventStreamResponse(source, ping_interval=self.ping_interval, write_timeout=self.options.write_timeout,
                                           disconnected=disconnected, stopped=gate.stopped)
            source = _EventSource(self, run)
        finally:
            gate.starting -= 1
        return await self._collected(chat, duet, source, completion_id, disconnected, token)

    async def _collected(
        self,
        chat: ChatCompletionRequest,
        duet: Duet,
        source: "_EventSource",
        completion_id: str,
        disconnected: asyncio.Future[None],
        token: CancellationToken,
    ) -> Response:
        collector = asyncio.ensure_future(source.collect())
        stopped = self.gate.stopped
        try:
            await asyncio.wait({collector, disconnected, stopped}, return_when=asyncio.FIRST_COMPLETED)
            client_left = disconnected.done()
        finally:
            disconnected.cancel()
            try:
                if not collector.done():  # the client hung up or the server stops: stop the models
                    token.cancel()
                    await cancel_and_wait(collector)
            finally:
                await source.close()
        if collector.cancelled():
            return Response(status_code=499) if client_left else shutting_down().response(headers={"connection": "close"})
        fold = CompletionFold(completion_id, int(time.time()), chat.model)
        renderer = Renderer(fold, duet.reasoning_output, chat.legacy_functions)
        renderer.start()
        for event in collector.result():
            renderer.render(event)
        result = fold.result()
        if isinstance(result, APIError):
            return result.response()
        return TimedWriteResponse(JSONResponse(result.model_dump(mode="json")), self.options.write_timeout)


class _EventSource:
    """One request's run as an :class:`~duet.api.sse.EventSource`. Closed exactly once however the
    response ends (finished, failed, client gone, never started), which stops the duet's model
    calls if they still run."""

    def __init__(
        self,
        service: ChatCompletionsService,
        run: DuetStream,
        renderer: Renderer | None = None,
        writer: ChunkWriter | None = None,
        first_wait: float = 5.0,
    ) -> None:
        """``renderer`` (writing to ``writer``) and ``first_wait`` serve a streamed response; a collected one needs none."""
        self._service = service
        self._run = run
        self._renderer = renderer
        self._writer = writer
        self.first_wait = first_wait
        self._first: list[DuetEvent] = []
        self._closed = False
        service.in_flight += 1

    async def start(self) -> Response | None:
        # Hold the status line back until the duet's first event, so failures that come fast (a
        # bad upstream key, an unreachable server) get a real HTTP status. A slow start is
        # committed after one ping interval: the client then sees keep-alives, not nothing.
        self._first = await self._run.next_batch(timeout=self.first_wait)
        if self._first and isinstance(self._first[0], Failed):
            return as_api_error(self._first[0].error).response()
        return None

    async def collect(self) -> list[DuetEvent]:
        return [event async for event in self._run]

    async def chunks(self) -> AsyncIterator[bytes]:
        assert self._renderer is not None and self._writer is not None
        render, take = self._renderer.render, self._writer.take
        self._renderer.start()
        for event in self._first:
            render(event)
        yield take()
        while not self._run.ended:
            for event in await self._run.next_batch():
                render(event)
            yield take()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._service.in_flight -= 1
        await self._run.close()
