"""A lean AutoGen ``ChatCompletionClient`` for OpenAI-compatible servers.

Why not ``OpenAIChatCompletionClient`` on the hot path: the openai SDK builds a pydantic object
per streamed chunk, which costs ~6.4 ms of CPU for a 40-chunk stream on this project's reference
machine; parsing the same stream as JSON lines over aiohttp costs ~0.5 ms (``bench/``). This
client keeps AutoGen's streaming contract — ``str`` pieces, then one ``CreateResult`` — so a team
file may name either client, and fixes two stock bugs the duet would trip over (``thought``
stripped by characters; reasoning dropped when the model also calls tools).

Split as autogen-ext splits its own clients: the options (``_options``), the wire transform
(``_transform``), the stream accumulator (``_accumulator``, pure) and the result (``_result``), the
SSE reader (``_sse``), the connection pools and transport tricks (``_transport``), what an upstream's
failures stand for (``_errors``); this module sends, retries and reads.

Example (the pieces of a stream; :class:`~duet.agents.ReasoningText` pieces are the reasoning)::

    client = OpenAICompatibleClient(model="qwen2.5", base_url="http://localhost:11434/v1")
    async for piece in client.create_stream([UserMessage(content="Hi", source="user")]):
        print(piece)
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import weakref
from typing import Any, AsyncGenerator, Literal, Mapping, Optional, Sequence, Union

import aiohttp
import yarl
from autogen_core import CancellationToken, Component
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    ModelCapabilities,
    ModelInfo,
    RequestUsage,
    validate_model_info,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel
from typing_extensions import Self

from duet.agents._cancellation import unlink
from duet.agents._errors import (
    UpstreamConnectionError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnreachable,
    register_secrets,
)
from duet.agents._model_reasoning import ReasoningField
from duet.agents._options import CacheMark
from duet.agents._observe import request_sent_hook, upstream_headers
from duet.agents.upstream._accumulator import StreamAccumulator
from duet.agents.upstream._cache_hints import CACHE_KEY_HOSTS, CACHE_MARK_HOSTS, CACHE_MARKS_ARG, takes_hint
from duet.agents.upstream._errors import (
    describe,
    unlisted_model,
    not_an_answer,
    read_failure,
    retry_after_seconds,
    send_failure,
    status_error,
)
from duet.agents.upstream._options import (
    ANSWER_MODEL_INFO,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_WAIT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BACKOFF,
    CacheHint,
    OpenAICompatibleClientConfig,
)
from duet.agents.upstream._result import UpstreamResult, add_usage
from duet.agents.upstream._sse import EventTooLarge, sse_data
from duet.agents.upstream._transform import flat_create_args, messages_to_openai, request_body, tool_to_openai
from duet.agents.upstream._transport import (
    Canceller,
    Connector,
    LightResponse,
    ReadCancelled,
    SentBody,
    abort_read,
    finish_body,
    forget,
    lighten,
    media_type,
    hold_reading,
    read_bounded,
    release_reading,
    shared_pools,
)

MAX_ERROR_BODY = 64 * 1024
"""Bytes of an upstream's error answer read for its message (the rest is not read)."""
MAX_JSON_BODY = 32 * 1024 * 1024
"""Largest plain-JSON answer accepted from an upstream that ignores ``stream: true``."""
STREAMED_TEXT_UNKEPT_ARG = "duet_streamed_text_unkept"
"""A ``create_stream`` argument (any value) from a caller that keeps the streamed text itself, as Duet's
reasoning agent does: the stream's result then carries none of it (content ``""``, thought ``None``),
so a long reasoning is not held twice while it streams. Never sent upstream."""


class OpenAICompatibleClient(ChatCompletionClient, Component[OpenAICompatibleClientConfig]):
    """Streams chat completions from any OpenAI-compatible server (OpenAI, Ollama, vLLM, DeepSeek, ...).

    Args:
        model: the upstream model name.
        base_url: the server's OpenAI base URL, e.g. ``http://localhost:11434/v1``.
        api_key: the key itself (not serialised); defaults to the value of ``api_key_env``.
        api_key_env: name of the environment variable holding the key.
        model_info: AutoGen model capabilities; defaults to :data:`ANSWER_MODEL_INFO`.
        create_args: request fields sent with every call (``temperature``, ``extra_body``, ...).
        max_retries, retry_backoff, max_retry_wait: the retry policy for calls that failed before
            the upstream sent any answer (see :class:`OpenAICompatibleClientConfig`).

    ``create_stream`` yields the upstream's reasoning deltas (``reasoning_content`` or ``reasoning``)
    as :class:`~duet.agents.ReasoningText` pieces and its answer deltas as plain ``str`` pieces, then
    one ``CreateResult`` whose ``thought`` is the whole reasoning (or, with tool calls, the text
    said beside them). Unlike AutoGen's ``OpenAIChatCompletionClient``, the reasoning is not wrapped
    in ``<think>``/``</think>`` pieces: a consumer that only knows ``str`` (an ``AssistantAgent``
    streaming chunks) gets the reasoning and then the answer as text, with no tags between them;
    ``isinstance(piece, ReasoningText)`` tells them apart. Text an upstream writes inline
    (``<think>`` in its content) stays in the plain pieces, as it came.

    Errors are :class:`~duet.agents._errors.UpstreamError` subclasses that name the model (never the
    URL) and keep the upstream's status, ``code``, ``type``, ``param`` and ``Retry-After``.
    """

    component_type = "model"
    component_config_schema = OpenAICompatibleClientConfig
    component_provider_override = "duet.agents.OpenAICompatibleClient"

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        model_info: ModelInfo | None = None,
        create_args: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        cache_marks: CacheHint = "auto",
        cache_key: CacheHint = "auto",
    ) -> None:
        self._config = OpenAICompatibleClientConfig(
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            model_info=model_info or dict(ANSWER_MODEL_INFO),
            create_args=dict(create_args or {}),
            headers=dict(headers or {}),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_connections=max_connections,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            max_retry_wait=max_retry_wait,
            cache_marks=cache_marks, cache_key=cache_key,
        )
        validate_model_info(self._config.model_info)
        key = api_key if api_key is not None else (os.environ.get(api_key_env) if api_key_env else None)
        register_secrets([key, *self._config.headers.values()])  # masked in every error message and log line
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **self._config.headers}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._models_headers = {k: v for k, v in self._headers.items() if k not in ("Content-Type", "Accept")}
        root = base_url.rstrip("/")
        self._url = yarl.URL(root + "/chat/completions")  # parsed once, not per request
        self._models_url = yarl.URL(root + "/models")
        # The key of the connection pool it shares (a relative URL fails later, when it is called, as before).
        self._origin = str(self._url.origin()) if self._url.is_absolute() else root
        self._default_args = flat_create_args(self._config.create_args)
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._total_usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self._actual_usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self._reasoning_field: ReasoningField | None = None
        self.thinks_in_content: bool | None = None
        """Whether the model writes its thinking as plain text ended by a lone ``</think>`` (a thinking
        chat template served without a reasoning parser), as its last answers showed; ``None``: not seen
        yet (:func:`~duet.agents._thinking.opens_thinking` guesses from the name)."""
        self.issues_short_ids = False  # its upstream issued Mistral's call ids (duet.agents._upstream_calls)

    @functools.cached_property
    def sends_cache_marks(self) -> bool:
        """The client's cache marks (``extra_create_args[CACHE_MARKS_ARG]``) go on to this upstream."""
        return takes_hint(self._config.cache_marks, self._config.base_url, CACHE_MARK_HOSTS)

    @functools.cached_property
    def takes_cache_key(self) -> bool:
        """A ``prompt_cache_key`` Duet derives (the reasoner's) may be sent to this upstream."""
        return takes_hint(self._config.cache_key, self._config.base_url, CACHE_KEY_HOSTS)

    @property
    def reasoning_field(self) -> ReasoningField | None:
        """How this upstream spells its reasoning, once an answer of it carried some (``None`` before)."""
        return self._reasoning_field

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def base_url(self) -> str:
        return self._config.base_url

    def _get_session(self, fresh: bool = False) -> aiohttp.ClientSession:
        """The pooled session of this event loop, created on first use (aiohttp needs a running
        loop); ``fresh``: a session whose every request opens a new connection and closes it after,
        for the retry after a pooled connection turned out to be closed (the pool may hold more)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session_loop is not loop or self._session.closed:
            if self._config.max_connections:  # a bounded pool is this client's own
                connector = Connector(limit=self._config.max_connections, ttl_dns_cache=300)
                self._session = self._new_session(connector)
            else:
                self._session = self._new_session(shared_pools.acquire(loop, self._origin, self), shared=True)
            self._fresh = None
            self._session_loop = loop
        if not fresh:
            return self._session
        if self._fresh is None or self._fresh.closed:
            self._fresh = self._new_session(Connector(limit=0, force_close=True, ttl_dns_cache=300))
        return self._fresh

    def _new_session(self, connector: aiohttp.TCPConnector, shared: bool = False) -> aiohttp.ClientSession:
        # Model APIs set no cookies worth keeping; a dummy jar skips cookie handling per request.
        return aiohttp.ClientSession(connector=connector, connector_owner=not shared, timeout=self._timeout,
                                     cookie_jar=aiohttp.DummyCookieJar(), response_class=LightResponse)

    def _request_body(
        self,
        messages: Sequence[LLMMessage],
        tools: Sequence[Tool | ToolSchema],
        tool_choice: Tool | str,
        json_output: Optional[bool | type[BaseModel]],
        extra_create_args: Mapping[str, Any],
    ) -> bytes:
        marks: Sequence[CacheMark] = ()
        if CACHE_MARKS_ARG in extra_create_args:  # Duet's own argument, never a field of the request
            extra_create_args = dict(extra_create_args)
            given = extra_create_args.pop(CACHE_MARKS_ARG)
            marks = given if self.sends_cache_marks else ()  # an upstream that does not document them would refuse them
        return request_body(self._config.model, self._default_args, messages, tools, tool_choice, json_output, extra_create_args,
                            marks)

    async def _open(self, body: bytes, cancellation_token: CancellationToken | None) -> aiohttp.ClientResponse:
        """Sends the request; returns a 200 response (its body unread), or raises. A failure before
        the upstream sent any answer (no connection, 429, 5xx) is retried by the retry policy."""
        config = self._config
        retries = 0
        fresh = False
        while True:
            try:
                response = await self._send(self._url, body, cancellation_token, fresh)
            except (TimeoutError, aiohttp.ClientError) as exc:
                failure, retry = send_failure(exc, config.model, config.connect_timeout, config.read_timeout, config.base_url)
                if retry == "on a new connection" and not fresh:
                    fresh = True  # at once: the pool may hold more connections the server closed
                    continue
                retryable = retry != "no"
            else:
                if response.status == 200:
                    return response
                failure = await self._status_error(response)
                status = failure.upstream_status or 0
                retryable = status == 429 or status >= 500
            delay = self._retry_delay(failure, retries) if retryable else None
            if delay is None:
                failure.retries = retries  # a client's own retries on top of these would multiply the calls
                raise failure
            retries += 1
            await self._sleep(delay, cancellation_token)

    async def _send(
        self, url: yarl.URL, body: bytes, cancellation_token: CancellationToken | None, fresh: bool = False
    ) -> aiohttp.ClientResponse:
        session = self._get_session(fresh)
        headers = self._headers
        tracing = upstream_headers()  # set while an observed model call sends its request
        if tracing:
            headers = {**headers, **tracing}
        sent = request_sent_hook.get()
        data: bytes | SentBody = body if sent is None and cancellation_token is None else SentBody(body, sent, cancellation_token)
        task = asyncio.current_task()
        if cancellation_token is None or task is None:
            response = await session.post(url, data=data, headers=headers)
        else:
            # Sent from this task, not a task of its own: no turn of the event loop between the call
            # and its request, nor between the answer's first bytes and its reader. The token cancels
            # the task while the request is on its way, and, as asyncio.timeout does, the cancellation
            # is taken back once delivered: the caller gets CancelledError as from a cancelled request,
            # and the task's count of cancellations says only what others asked (a time limit reads it).
            if cancellation_token.is_cancelled():
                raise asyncio.CancelledError()
            canceller = Canceller(task)
            cancellation_token.add_callback(canceller)
            try:
                response = await session.post(url, data=data, headers=headers)
            except asyncio.CancelledError:
                if canceller.fired:
                    task.uncancel()
                raise
            finally:
                unlink(cancellation_token, canceller)
            if canceller.fired:  # the answer came just as the token was cancelled, and nothing raised
                task.uncancel()
                response.close()
                raise asyncio.CancelledError()
        lighten(response)
        if cancellation_token is not None:
            # Closing the response aborts a read at once and drops the connection, so the
            # upstream stops generating; no task per chunk is needed.
            cancellation_token.add_callback(functools.partial(abort_read, weakref.ref(response)))
        return response

    def _retry_delay(self, failure: UpstreamError, retries: int) -> float | None:
        """Seconds to wait before the next try, or ``None`` to give up and pass ``failure`` on."""
        if retries >= self._config.max_retries:
            return None
        retry_after = retry_after_seconds(failure.retry_after)
        if retry_after is not None:
            return retry_after if retry_after <= self._config.max_retry_wait else None
        backoff = self._config.retry_backoff * 2**retries
        return backoff * (0.5 + random.random() / 2)  # jitter: clients that failed together do not return together

    @staticmethod
    async def _sleep(seconds: float, cancellation_token: CancellationToken | None) -> None:
        sleep = asyncio.ensure_future(asyncio.sleep(seconds))
        if cancellation_token is not None:
            cancellation_token.link_future(sleep)
        await sleep

    async def _status_error(self, response: aiohttp.ClientResponse) -> UpstreamError:
        """The error an upstream's non-200 answer stands for (the response is released)."""
        try:
            raw, _ = await read_bounded(response, MAX_ERROR_BODY)
        except (TimeoutError, aiohttp.ClientError) as exc:
            forget(exc)
            raw = b""
        finally:
            response.release()
        return status_error(raw, response.status, response.content_type, response.headers.get("Retry-After"), self._config.model)

    async def check_ready(self, timeout: float, models: Sequence[str] = ()) -> None:
        """Readiness: asks the upstream's ``GET /models`` with this client's headers. Returns when it
        answers 200 within ``timeout`` seconds with a list that holds the model and ``models`` (others
        configured on the same upstream), or no list it can read; raises an
        :class:`~duet.agents._errors.UpstreamError` otherwise (:class:`~duet.agents._errors.UpstreamModelNotFound`
        for a model it does not list)."""
        model = self._config.model
        failure: UpstreamError | None = None
        try:
            async with asyncio.timeout(timeout):
                async with self._get_session().get(self._models_url, headers=self._models_headers) as response:
                    if response.status != 200:
                        failure = await self._status_error(response)
                    else:
                        raw = (await read_bounded(response, MAX_ERROR_BODY * 16))[0]
                        failure = next(filter(None, (unlisted_model(raw, name) for name in (model, *models))), None)
        except TimeoutError as exc:
            forget(exc)
            failure = UpstreamTimeout(f"did not answer GET /models within {timeout:g}s", model=model)
        except aiohttp.ClientConnectorError as exc:
            failure = UpstreamUnreachable(f"cannot be reached: {describe(exc)}", model=model, base_url=self._config.base_url)
            forget(exc)
        except aiohttp.ClientError as exc:
            failure = UpstreamConnectionError(f"failed GET /models: {describe(exc)}", model=model)
            forget(exc)
        if failure is not None:
            raise failure

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: Optional[bool | type[BaseModel]] = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: Optional[CancellationToken] = None,
    ) -> AsyncGenerator[Union[str, CreateResult], None]:
        if cancellation_token is not None and cancellation_token.is_cancelled():
            raise asyncio.CancelledError()
        keep_text = STREAMED_TEXT_UNKEPT_ARG not in extra_create_args
        if not keep_text:  # Duet's own argument, never a field of the request
            extra_create_args = {name: value for name, value in extra_create_args.items() if name != STREAMED_TEXT_UNKEPT_ARG}
        body = self._request_body(messages, tools, tool_choice, json_output, extra_create_args)
        response = await self._open(body, cancellation_token)
        del body  # sent: not kept for as long as the answer streams
        content_type = media_type(response)
        if content_type == "application/json":  # an upstream that ignores "stream": true
            for item in await self._read_completion(response, cancellation_token):
                yield item
            return
        if content_type == "text/html":
            raise await self._unexpected_body(response, "an HTML page")
        stream = StreamAccumulator(self._config.model, keep_text)
        failure: UpstreamError | None = None
        cancelled = False
        reading = sse_data(response, stream)
        try:
            async for events in reading:
                pieces = stream.read(events)
                events = None  # type: ignore[assignment]  # nothing of a read stays with the stream while it waits for the next
                if stream.first_piece >= 0:  # the first token: the caller's writer sends it before more is read
                    for piece in pieces[: stream.first_piece]:
                        yield piece
                    held = hold_reading(response)
                    try:
                        yield pieces[stream.first_piece]
                        await asyncio.sleep(0)
                    finally:
                        release_reading(held)
                    del pieces[: stream.first_piece + 1]
                for piece in pieces:
                    yield piece
                pieces = piece = None  # type: ignore[assignment]
                if stream.ended:
                    if stream.done:
                        await finish_body(response)
                    break
        except ReadCancelled as exc:
            exc.__traceback__ = None  # it is referenced by the response: no cycle through this frame
            cancelled = True
        except (TimeoutError, EventTooLarge, aiohttp.ClientError) as exc:
            failure = read_failure(exc, self._config.model, self._config.read_timeout, streamed=True)
        finally:
            response.release()
            await reading.aclose()  # left at its last read at the stream's end: not closed by the loop's finalizer (a task)
        # What stopped the stream is raised outside the handlers: a new exception never chains the one aiohttp raised.
        yield self._outcome(stream, content_type, failure, cancelled, cancellation_token)

    def _outcome(
        self,
        stream: StreamAccumulator,
        content_type: str,
        failure: UpstreamError | None,
        cancelled: bool,
        cancellation_token: CancellationToken | None,
    ) -> UpstreamResult:
        """The result of a stream that was read to its end, or what stopped it, raised: the call's
        cancellation, a failed read (``failure``), an error in the stream, an unfinished stream."""
        if cancelled or (cancellation_token is not None and cancellation_token.is_cancelled()):
            raise asyncio.CancelledError()
        failure = failure or stream.failure or stream.unfinished(content_type)
        if failure is not None:
            raise failure
        return self._counted(stream.result())

    async def _unexpected_body(self, response: aiohttp.ClientResponse, what: str) -> UpstreamError:
        """The protocol error for a 200 whose body is not an answer (the response is released)."""
        try:
            raw, _ = await read_bounded(response, 2000)
        except (TimeoutError, aiohttp.ClientError) as exc:
            forget(exc)
            raw = b""
        finally:
            response.release()
        return not_an_answer(raw, what, self._config.model)

    async def _read_completion(
        self, response: aiohttp.ClientResponse, cancellation_token: CancellationToken | None
    ) -> list[str | CreateResult]:
        """A plain ``chat.completion`` body as the pieces a stream would have given, then its result;
        an error object as the error it stands for."""
        model = self._config.model
        failure: UpstreamError | None = None
        raw, too_long = b"", False
        try:
            raw, too_long = await read_bounded(response, MAX_JSON_BODY)
        except ReadCancelled as exc:
            exc.__traceback__ = None
        except (TimeoutError, aiohttp.ClientError) as exc:
            failure = read_failure(exc, model, self._config.read_timeout, streamed=False)
        finally:
            response.release()
        if cancellation_token is not None and cancellation_token.is_cancelled():
            raise asyncio.CancelledError()
        if failure is not None:
            raise failure
        if too_long:
            raise UpstreamProtocolError(f"answered with a JSON body larger than {MAX_JSON_BODY} bytes", model=model)
        pieces, result = StreamAccumulator(model).read_completion(raw)
        return [*pieces, self._counted(result)]

    def _counted(self, result: UpstreamResult) -> UpstreamResult:
        """``result``, counted in this client's usage; its reasoning's spelling remembered."""
        if result.reasoning_field is not None:
            self._reasoning_field = result.reasoning_field
        self._total_usage = add_usage(self._total_usage, result.usage)
        self._actual_usage = add_usage(self._actual_usage, result.usage)
        return result

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = [],
        tool_choice: Tool | Literal["auto", "required", "none"] = "auto",
        json_output: Optional[bool | type[BaseModel]] = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: Optional[CancellationToken] = None,
    ) -> CreateResult:
        """Same request as :meth:`create_stream`, collected into one result."""
        result: CreateResult | None = None
        async for item in self.create_stream(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            json_output=json_output,
            extra_create_args=extra_create_args,
            cancellation_token=cancellation_token,
        ):
            if isinstance(item, CreateResult):
                result = item
        assert result is not None
        return result

    async def close(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None and not session.closed:
                await session.close()
        if self._session is not None and self._session_loop is not None and not self._config.max_connections:
            await shared_pools.release(self._session_loop, self._origin, self)
        self._session = self._fresh = None

    def actual_usage(self) -> RequestUsage:
        return self._actual_usage

    def total_usage(self) -> RequestUsage:
        return self._total_usage

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []) -> int:
        """A rough estimate (4 characters a token): tokenizer files cannot be fetched at run time."""
        size = sum(len(json.dumps(m, default=str)) for m in messages_to_openai(messages))
        size += sum(len(json.dumps(tool_to_openai(tool))) for tool in tools)
        return size // 4

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = []) -> int:
        return max(0, 128_000 - self.count_tokens(messages, tools=tools))

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._config.model_info

    @property
    def model_info(self) -> ModelInfo:
        return self._config.model_info

    def _to_config(self) -> OpenAICompatibleClientConfig:
        return self._config.model_copy(deep=True)

    @classmethod
    def _from_config(cls, config: OpenAICompatibleClientConfig) -> Self:
        return cls(**config.model_dump())
