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

from duet.agents import AnswerOptions, Duet, DuetEvent, DuetResult, DuetStream, Failed, ReasoningOutput, conversation_from_openai
from duet.workbenches import ProxyTool, model_safe_name, proxy_tools_from_openai

from .chunks import DONE, ChunkEncoder
from .errors import APIError, as_api_error
from .limits import RETRY_AFTER_SECONDS, RequestGate, is_json, shutting_down
from .settings import ServiceOptions
from .protocol import ANSWER_MODEL_FIELDS, ChatCompletionRequest, NamedFunction, NamedToolChoice, ResponseFormat
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


class StreamAdapter:
    """Turns the duet's events into chunk bytes for one response."""

    __slots__ = (
        "encoder", "_mode", "_legacy", "_include_usage", "_think_open", "_tool_index", "_reasoning_source",
        "prompt_tokens", "completion_tokens",
    )

    def __init__(self, encoder: ChunkEncoder, reasoning_output: ReasoningOutput, legacy: bool, include_usage: bool) -> None:
        self.encoder = encoder
        self._mode = reasoning_output
        self._legacy = legacy
        self._include_usage = include_usage
        self._think_open = False
        self._tool_index = 0
        self._reasoning_source = ""
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def _close_think(self) -> bytes:
        if self._think_open:
            self._think_open = False
            return self.encoder.content("\n</think>\n\n")
        return b""

    def encode(self, event: DuetEvent) -> bytes:
        kind = event.kind
        if kind == "content":
            text = self.encoder.content(event.text)  # type: ignore[union-attr]
            return self._close_think() + text if self._think_open else text
        if kind == "reasoning":
            if self._mode == "hidden":
                return b""
            text = event.text  # type: ignore[union-attr]
            if event.source != self._reasoning_source:  # type: ignore[union-attr]
                if self._reasoning_source:
                    text = "\n\n" + text  # the answer model's thinking follows the reasoner's
                self._reasoning_source = event.source  # type: ignore[union-attr]
            if self._mode == "reasoning_content":
                return self.encoder.reasoning(text)
            if self._think_open:
                return self.encoder.content(text)
            self._think_open = True
            return self.encoder.content("<think>\n" + text)
        if kind == "usage":
            self.prompt_tokens += event.prompt_tokens  # type: ignore[union-attr]
            self.completion_tokens += event.completion_tokens  # type: ignore[union-attr]
            return b""
        if kind == "tool_calls":
            out = [self._close_think()]
            for call in event.calls:  # type: ignore[union-attr]
                if self._legacy:
                    out += [self.encoder.function_call_head(call.name), self.encoder.function_call_arguments(call.arguments)]
                    break  # legacy clients take one call
                out += [
                    self.encoder.tool_call_head(self._tool_index, call.id, call.name),
                    self.encoder.tool_call_arguments(self._tool_index, call.arguments),
                ]
                self._tool_index += 1
            return b"".join(out)
        if kind == "done":
            reason = event.finish_reason  # type: ignore[union-attr]
            if self._legacy and reason == "tool_calls":
                reason = "function_call"
            out = self._close_think() + self.encoder.finish(reason)
            if self._include_usage:
                out += self.encoder.usage(self.prompt_tokens, self.completion_tokens)
            return out + DONE
        if kind == "error":
            return self._close_think() + self.encoder.error(as_api_error(event.error).body())  # type: ignore[union-attr]
        return b""


def completion_body(
    completion_id: str, created: int, model: str, reasoning_output: ReasoningOutput, legacy: bool, events: list[DuetEvent]
) -> dict[str, Any]:
    """One ``chat.completion`` from all the events of a run."""
    result = DuetResult.of(events)
    content, calls, finish = result.content, result.tool_calls, result.finish_reason
    if result.reasoning and reasoning_output == "think":
        content = f"<think>\n{result.reasoning}\n</think>\n\n{content}"
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if result.reasoning and reasoning_output == "reasoning_content":
        message["reasoning_content"] = result.reasoning
    if calls and legacy:
        message["function_call"] = {"name": calls[0].name, "arguments": calls[0].arguments}
        finish = "function_call"  # type: ignore[assignment]
    elif calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
    prompt, completion = result.prompt_tokens, result.completion_tokens
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


class ChatCompletionsService:
    """Serves the pipelines by name. Knows HTTP; knows nothing of model clients."""

    def __init__(self, pipelines: Mapping[str, Duet], options: ServiceOptions | None = None, gate: RequestGate | None = None) -> None:
        self.pipelines = dict(pipelines)
        self.options = options or ServiceOptions()
        self.gate = gate or RequestGate(self.options)
        self.ping_interval = self.options.ping_interval
        self.created = int(time.time())
        self.in_flight = 0

    def model_list(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": self.created, "owned_by": "duet"} for name in self.pipelines],
        }

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
                                 cancellation_token=token)
            except BaseException:
                disconnected.cancel()
                raise
            if chat.stream:
                adapter = StreamAdapter(ChunkEncoder(completion_id, int(time.time()), chat.model), duet.reasoning_output,
                                        chat.legacy_functions, chat.include_usage)
                source = _EventSource(self, run, adapter, first_wait=self.ping_interval)
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
        collected = collector.result()
        failure = next((e for e in collected if isinstance(e, Failed)), None)
        if failure is not None:
            return as_api_error(failure.error).response()
        body = completion_body(completion_id, int(time.time()), chat.model, duet.reasoning_output, chat.legacy_functions, collected)
        return TimedWriteResponse(JSONResponse(body), self.options.write_timeout)


class _EventSource:
    """One request's run as an :class:`~duet.api.sse.EventSource`. Closed exactly once however the
    response ends (finished, failed, client gone, never started), which stops the duet's model
    calls if they still run."""

    def __init__(
        self, service: ChatCompletionsService, run: DuetStream, adapter: StreamAdapter | None = None, first_wait: float = 5.0
    ) -> None:
        """``adapter`` and ``first_wait`` serve a streamed response; a collected one needs neither."""
        self._service = service
        self._run = run
        self.adapter = adapter
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
        assert self.adapter is not None
        encode = self.adapter.encode
        yield self.adapter.encoder.role() + b"".join(encode(event) for event in self._first)
        while not self._run.ended:
            batch = await self._run.next_batch()
            yield encode(batch[0]) if len(batch) == 1 else b"".join(encode(event) for event in batch)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._service.in_flight -= 1
        await self._run.close()
