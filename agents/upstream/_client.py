"""A lean AutoGen ``ChatCompletionClient`` for OpenAI-compatible servers.

Why not ``OpenAIChatCompletionClient`` on the hot path: the openai SDK builds a pydantic object
per streamed chunk, which costs ~6.4 ms of CPU for a 40-chunk stream on this project's reference
machine; parsing the same stream as JSON lines over aiohttp costs ~0.5 ms (``bench/``). This
client keeps AutoGen's streaming contract — ``str`` pieces, then one ``CreateResult`` — so a team
file may name either client, and fixes two stock bugs the duet would trip over (``thought``
stripped by characters; reasoning dropped when the model also calls tools).

Example (the pieces of a stream; :class:`~duet.agents.ReasoningText` pieces are the reasoning)::

    client = OpenAICompatibleClient(model="qwen2.5", base_url="http://localhost:11434/v1")
    async for piece in client.create_stream([UserMessage(content="Hi", source="user")]):
        print(piece)
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import os
import random
import weakref
from email.utils import parsedate_to_datetime
from time import time as wall_clock
from typing import Any, AsyncGenerator, Callable, Literal, Mapping, Optional, Sequence, Union

import aiohttp
import yarl
from autogen_core import CancellationToken, Component, FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelCapabilities,  # type: ignore[attr-defined]
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
    validate_model_info,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel, Field
from typing_extensions import Self

from duet.workbenches import derived_from

from duet.agents._model_reasoning import DEFAULT_REASONING_FIELD, ReasonedAssistantMessage, ReasoningField, details_text, merge_details
from duet.agents._errors import (
    UpstreamConnectionError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnreachable,
    error_fields,
    register_secrets,
    upstream_error_text,
)
from duet import _wire_json as wire_json
from duet.agents._cancellation import still_wanted, unlink
from duet.agents._observe import request_sent_hook, upstream_headers
from duet._small_deque import lighten_deque
from duet.agents._text_parts import TextParts
from duet.agents._thinking import ReasoningText

ANSWER_MODEL_INFO: ModelInfo = {
    "vision": False,
    "function_calling": True,
    "json_output": True,
    "family": "unknown",
    "structured_output": False,
    "multiple_system_messages": True,
}
"""Default ``model_info`` for a model AutoGen does not know: assume it can call functions."""

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "function_calls",
    "function_call": "function_calls",
    "content_filter": "content_filter",
}

MAX_ERROR_BODY = 64 * 1024
"""Bytes of an upstream's error answer read for its message (the rest is not read)."""
MAX_JSON_BODY = 32 * 1024 * 1024
"""Largest plain-JSON answer accepted from an upstream that ignores ``stream: true``."""
MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Largest single server-sent event (a stream without event separators is not buffered forever)."""
JOINED_CHUNKS = 16
JOINED_CHARS = 4096
"""The most text one piece joins from the chunks of one read (chunks, characters): the agents' event
channel is bounded in events (:data:`~duet.agents.pipeline._stream.MAX_BUFFERED_EVENTS`), so the text a piece
may carry bounds what a client that stops reading leaves buffered."""
SINGLE_CHUNK_READS = 8
"""Reads of one HTTP chunk each, at most, at the start of a stream (see ``_sse_data``)."""
END_OF_BODY_WAIT = 0.005
"""Seconds a finished stream's last bytes are waited for after ``[DONE]`` (they usually come with it)."""


# The defaults of the client's options, named once: the config's fields, the client's keyword
# arguments and the YAML model settings (which share the config's fields) all refer to them.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 300.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_RETRY_BACKOFF = 0.5
DEFAULT_MAX_RETRY_WAIT = 10.0
DEFAULT_MAX_CONNECTIONS = 0


class ModelClientOptions(BaseModel):
    """An upstream model and how to call it: the fields a model client's config
    (:class:`OpenAICompatibleClientConfig`) and a model section of the YAML settings
    (:class:`~duet.agents.ModelSettings`) share. The API key is never stored: only the name of
    the environment variable that holds it."""

    model: str
    base_url: str
    api_key_env: Optional[str] = Field(None, description="Environment variable that holds the API key.")
    create_args: dict[str, Any] = Field(
        default_factory=dict, description="Request fields sent with every call (temperature, extra vendor fields, ...)."
    )
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout: float = Field(DEFAULT_CONNECT_TIMEOUT, description="Seconds to open a connection.")
    read_timeout: float = Field(DEFAULT_READ_TIMEOUT, description="Longest silence allowed from the upstream, in seconds.")
    max_retries: int = Field(
        DEFAULT_MAX_RETRIES,
        ge=0,
        description="Retries of a call that failed before the upstream sent any answer (no connection, 429, 5xx).",
    )
    retry_backoff: float = Field(
        DEFAULT_RETRY_BACKOFF, ge=0, description="Seconds before the first retry; doubled for each next one, with jitter."
    )
    max_retry_wait: float = Field(
        DEFAULT_MAX_RETRY_WAIT,
        ge=0,
        description="Longest Retry-After (seconds) waited out; a longer one is passed on to the client at once.",
    )


class UpstreamResult(CreateResult):
    """A ``CreateResult`` that also says how the upstream spelled its reasoning (the field a thinking
    model wants it back in), its ``reasoning_details`` and the reasoning tokens its usage counted."""

    reasoning_field: Optional[ReasoningField] = None
    reasoning_details: Optional[list[dict[str, Any]]] = None
    reasoning_tokens: int = 0


def reasoning_tokens(usage: Mapping[str, Any] | None) -> int:
    """``completion_tokens_details.reasoning_tokens`` of an upstream's usage (0 when not reported).

    >>> reasoning_tokens({"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}})
    7
    """
    details = (usage or {}).get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class OpenAICompatibleClientConfig(ModelClientOptions):
    """Serialisable configuration of :class:`OpenAICompatibleClient`."""

    model_info: ModelInfo = Field(default_factory=lambda: dict(ANSWER_MODEL_INFO))  # type: ignore[arg-type]
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, description="Connection pool size; 0 means unlimited.")


def message_to_openai(message: LLMMessage) -> list[dict[str, Any]]:
    """One AutoGen ``LLMMessage`` as OpenAI chat messages (a tool-result message becomes one per call).

    >>> from autogen_core.models import FunctionExecutionResult
    >>> message_to_openai(UserMessage(content="Hi", source="user"))
    [{'role': 'user', 'content': 'Hi'}]
    >>> message_to_openai(FunctionExecutionResultMessage(content=[
    ...     FunctionExecutionResult(content="18°C", call_id="call_1", name="weather"),
    ...     FunctionExecutionResult(content="21°C", call_id="call_2", name="weather")]))
    [{'role': 'tool', 'tool_call_id': 'call_1', 'content': '18°C'}, {'role': 'tool', 'tool_call_id': 'call_2', 'content': '21°C'}]
    """
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": message.content}]
    if isinstance(message, UserMessage):
        if isinstance(message.content, str):
            return [{"role": "user", "content": message.content}]
        parts = [
            {"type": "text", "text": part} if isinstance(part, str) else part.to_openai_format()
            for part in message.content
        ]
        return [{"role": "user", "content": parts}]
    if isinstance(message, AssistantMessage):
        if isinstance(message.content, str):
            return [{"role": "assistant", "content": message.content}]
        calls = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.content
        ]
        entry: dict[str, Any] = {"role": "assistant", "content": message.thought or None, "tool_calls": calls}
        if isinstance(message, ReasonedAssistantMessage):  # the model's own reasoning, sent back as its API expects
            entry.update(message.reasoning.wire(DEFAULT_REASONING_FIELD))
        return [entry]
    if isinstance(message, FunctionExecutionResultMessage):
        return [{"role": "tool", "tool_call_id": result.call_id, "content": result.content} for result in message.content]
    raise TypeError(f"Unsupported message type: {type(message).__name__}")


_PLAIN_ROLES: dict[type, str] = {SystemMessage: "system", UserMessage: "user", AssistantMessage: "assistant"}


def messages_to_openai(messages: Sequence[LLMMessage]) -> list[dict[str, Any]]:
    """A conversation as OpenAI chat messages: :func:`message_to_openai` of each, a plain text turn
    (most of a long history) written directly.

    >>> messages_to_openai([SystemMessage(content="Be brief."), UserMessage(content="Hi", source="user")])
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = _PLAIN_ROLES.get(message.__class__)  # the exact class: a subclass may carry more (reasoning)
        if role is not None and message.content.__class__ is str:
            out.append({"role": role, "content": message.content})
        else:
            out.extend(message_to_openai(message))
    return out


def tool_to_openai(tool: Tool | ToolSchema) -> dict[str, Any]:
    """An AutoGen tool as an OpenAI ``tools`` entry; ``parameters`` is passed through untouched.

    >>> tool_to_openai({"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
    {'type': 'function', 'function': {'name': 'weather', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}}}}
    """
    schema = _schema_of(tool)
    function: dict[str, Any] = {"name": schema["name"]}
    if "description" in schema:
        function["description"] = schema["description"]
    if "parameters" in schema:
        function["parameters"] = schema["parameters"]
    if "strict" in schema:
        function["strict"] = schema["strict"]
    return {"type": "function", "function": function}


def _schema_of(tool: Tool | ToolSchema) -> Mapping[str, Any]:
    # A dict first: isinstance against the runtime-checkable Tool protocol inspects every member.
    if isinstance(tool, dict):
        return tool
    return tool.schema if isinstance(tool, Tool) else tool  # type: ignore[return-value]


def _encode_tool(schema: Mapping[str, Any]) -> str:
    return json.dumps(tool_to_openai(schema), ensure_ascii=False)  # type: ignore[arg-type]


def tools_json(tools: Sequence[Tool | ToolSchema]) -> str:
    """The OpenAI ``tools`` list as JSON. Each client tool's entry is encoded once, however many
    requests, stages and rounds send it (:func:`~duet.workbenches.derived_from`).

    >>> tools_json([{"name": "weather"}])
    '[{"type": "function", "function": {"name": "weather"}}]'
    """
    return "[" + ", ".join(
        derived_from(_schema_of(tool), "openai_json", _encode_tool) for tool in tools
    ) + "]"


def _tool_choice_to_openai(tool_choice: Tool | str) -> Any:
    if isinstance(tool_choice, str):
        return tool_choice
    return {"type": "function", "function": {"name": tool_choice.schema["name"]}}


async def _sse_data(response: aiohttp.ClientResponse, first_token_awaited: Callable[[], bool]) -> AsyncGenerator[list[bytes], None]:
    """The ``data`` of the server-sent events, a list for each read: the complete events that
    arrived together (several often do; a line-by-line reader would await each line).

    While ``first_token_awaited()`` is true, a read takes one HTTP chunk (at most
    :data:`SINGLE_CHUNK_READS` such reads). A model's first tokens come in a burst, and aiohttp
    hands over a buffered burst chunk by chunk at some cost each: the first token goes on before the
    rest of the burst is read. A connection that breaks does not lose what had arrived before it
    broke: those events come first, then the error."""
    content = response.content
    buffer = b""
    single_reads = SINGLE_CHUNK_READS
    broken: aiohttp.ClientError | None = None
    while broken is None:
        try:
            if single_reads and first_token_awaited():
                single_reads -= 1
                received, end_of_chunk = await content.readchunk()
                if not received and end_of_chunk:  # an empty read at a chunk's end: not the end of the body
                    continue
            else:
                received = await content.readany()
        except aiohttp.ClientError as exc:
            received = _received_before_failure(content)
            if not received:
                raise
            broken = exc
        if not received:
            break
        buffer = buffer + received if buffer else received
        held = b""
        if b"\r" in buffer:  # CRLF or CR line ends; a CR at the very end may still pair with an LF
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        events: list[bytes] = []
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            event = buffer[start:end]
            start = end + 2
            if event.startswith(b"data:") and b"\n" not in event:
                events.append(event[5:].lstrip())
            else:  # comments, ``event:``/``id:`` lines, multi-line data
                lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
                if lines:
                    events.append(b"\n".join(lines))
        buffer = buffer[start:] + held
        received = event = None  # type: ignore[assignment]  # the read is parsed: not kept while the next one is awaited
        if events:
            yield events
        events = lines = None  # type: ignore[assignment]
        if len(buffer) > MAX_EVENT_BYTES:
            raise _EventTooLarge()
    if broken is not None:
        raise broken


def _received_before_failure(content: aiohttp.StreamReader) -> bytes:
    """What aiohttp had received, unread, when the connection failed: its reads raise the failure
    before they hand that over. Relies on aiohttp 3.14's ``StreamReader`` (pinned): the failure is
    its ``_exception``, and a read hands over the buffer only while none is set."""
    failure = content.exception()
    if failure is None or not content._buffer:
        return b""
    content._exception = None
    try:
        return content.read_nowait()
    finally:
        content._exception = failure


class _SentBody(aiohttp.BytesPayload):
    """A request's body that is written only if ``cancellation_token`` is still wanted (its caller
    may have gone since the call began, while the connection was found), and tells ``sent`` once it
    has been written to the connection."""

    def __init__(self, body: bytes, sent: Callable[[], None] | None, cancellation_token: CancellationToken | None) -> None:
        super().__init__(body)
        self._sent = sent
        self._token = cancellation_token

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        # The last moment before the upstream sees a request (its head goes out with the body): a
        # client gone by now costs no model call. aiohttp closes the connection, nothing written.
        if not still_wanted(self._token):
            raise asyncio.CancelledError()
        await super().write_with_length(writer, content_length)
        if self._sent is not None:
            self._sent()


def _hold_reading(response: aiohttp.ClientResponse) -> Any:
    """Stops reading ``response``'s connection until :func:`_release_reading`; returns what to give
    it, or ``None`` when there is nothing to hold (no connection, or aiohttp's own flow control holds
    it already). The transport is paused, not aiohttp's protocol: the protocol's pause would also stop
    its parser after the next HTTP chunk once reading resumes. Held for one hand-off only, so aiohttp's
    read timeout keeps running meanwhile."""
    connection = response.connection
    protocol = connection.protocol if connection is not None else None
    transport = protocol.transport if protocol is not None else None
    if transport is None or protocol._reading_paused or not transport.is_reading():
        return None
    transport.pause_reading()
    return protocol


def _release_reading(protocol: Any) -> None:
    """Reads the connection :func:`_hold_reading` held again (unless aiohttp's flow control now holds it,
    or the connection is gone)."""
    transport = protocol.transport
    if transport is not None and not transport.is_closing() and not protocol._reading_paused:
        # In no context: with asyncio's own loop, reading again captures the context for as long as the
        # connection lives (in the pool, after this request). (aiohttp's own flow control resumes a
        # long answer's reading in the reader's context; uvloop, what the server runs, captures none.)
        contextvars.Context().run(transport.resume_reading)


class _EventTooLarge(Exception):
    """More than :data:`MAX_EVENT_BYTES` arrived without an event separator."""


class _ReadCancelled(asyncio.CancelledError):
    """Raised into a read that the request's cancellation stopped.

    Closing an aiohttp response wakes a waiting read with one module-level exception object
    (``aiohttp.client_reqrep._CONNECTION_CLOSED_EXCEPTION``); every raise of it appends the
    reader's frames to its traceback, and those frames hold the request (its team, runtime and
    messages) for ever. So a cancelled read gets an exception of its own, made for this request,
    before the response is closed: nothing of the request outlives it.
    """


def _abort_read(reference: weakref.ref[aiohttp.ClientResponse]) -> None:
    """The cancellation callback of an open response: stops a pending read at once and drops the
    connection, so the upstream stops generating. Holds the response weakly: the token outlives it
    (a run's token, the reasoner's response), and a response nobody reads any more needs no abort."""
    response = reference()
    if response is None:
        return
    if response.content.exception() is None:
        response.content.set_exception(_ReadCancelled())
    response.close()


def _media_type(response: aiohttp.ClientResponse) -> str:
    """``response.content_type`` (lower case, no parameters), without the dict of the header's
    parameters aiohttp parses and keeps on the response (~1.5 KB) for it."""
    media_type = (response.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    return media_type if media_type.count("/") == 1 else "application/octet-stream"  # aiohttp's default


def _lighten(response: aiohttp.ClientResponse) -> None:
    """aiohttp keeps a connection's parsed responses in a deque, which holds one for as long as the
    stream lasts (~750 bytes): a small one instead. The response's body chunks and their offsets stay
    in deques: a client that stops reading lets thousands of chunks pile up there (up to aiohttp's read
    limit), and a list would take them out one ``pop(0)`` at a time, quadratically."""
    if response.connection is not None:
        lighten_deque(response.connection.protocol, "_buffer", only_empty=True)


def _forget(exc: BaseException) -> None:
    """Drops the frames a caught aiohttp exception collected: it may be an object aiohttp shares
    between requests, whose traceback would otherwise keep this request alive."""
    exc.__traceback__ = None
    exc.__context__ = None


def _describe(exc: BaseException) -> str:
    """What went wrong on the connection, in words that name no host and no URL."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "host name not found"
    if isinstance(exc, aiohttp.ClientConnectorError):
        errno = exc.os_error.errno
        return os.strerror(errno).lower() if errno else "connection failed"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the response was cut off"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return type(exc).__name__


def _retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header (seconds or an HTTP date) in seconds from now."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - wall_clock())
    except (TypeError, ValueError):
        return None


async def _read_bounded(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of a response body, and whether the body was longer."""
    chunks: list[bytes] = []
    size = 0
    async for data in response.content.iter_any():
        chunks.append(data)
        size += len(data)
        if size > limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False


def _status_of(error: Mapping[str, Any]) -> int | None:
    """An HTTP status some servers put into an error object's ``code`` or ``status``."""
    for key in ("status", "code"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value < 600:
            return value
    return None


class _SharedPools:
    """The connection pools of unbounded clients (``max_connections=0``, the default), one per event
    loop and upstream (scheme, host, port). A pipeline's reasoning and answer clients on one server
    share one pool: the connection the reasoner's call frees carries the answer's call, so an open
    stream holds one upstream connection, not one per client (and one file descriptor fewer). A pool
    is closed when the last of its clients closes; a client with a bounded pool keeps its own."""

    def __init__(self) -> None:
        self._pools: dict[tuple[asyncio.AbstractEventLoop, str], tuple[aiohttp.TCPConnector, weakref.WeakSet[Any]]] = {}

    def acquire(self, loop: asyncio.AbstractEventLoop, origin: str, client: object) -> aiohttp.TCPConnector:
        for ended in [key for key in self._pools if key[0].is_closed()]:  # loops whose clients were never closed
            del self._pools[ended]
        pool = self._pools.get((loop, origin))
        if pool is None or pool[0].closed:
            pool = self._pools[(loop, origin)] = (_Connector(limit=0, ttl_dns_cache=300), weakref.WeakSet())
        pool[1].add(client)
        return pool[0]

    async def release(self, loop: asyncio.AbstractEventLoop, origin: str, client: object) -> None:
        pool = self._pools.get((loop, origin))
        if pool is None:
            return
        pool[1].discard(client)
        if not pool[1]:
            del self._pools[(loop, origin)]
            await pool[0].close()


_shared_pools = _SharedPools()


class _Connector(aiohttp.TCPConnector):
    """Opens each connection in a context of its own. A connection keeps the context it was opened
    in (its transport's callbacks run in it) for as long as it stays in the pool, and a request's
    context holds the whole request (its run, its team). Requests are sent from the caller's task:
    only a new connection costs a task."""

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        opening = asyncio.get_running_loop().create_task(super()._create_connection(req, traces, timeout),
                                                         context=contextvars.Context())
        try:
            return await opening
        except BaseException:
            opening.add_done_callback(_close_unclaimed)  # cancelled as it opened: nobody else will close it
            raise


def _close_unclaimed(opening: asyncio.Task[Any]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


class _Canceller:
    """What a cancelled token calls to stop the request its task is sending; remembers that it did."""

    __slots__ = ("task", "fired")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


class _ToolCallBuilder:
    __slots__ = ("id", "name", "arguments")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []

    def add(self, delta: Mapping[str, Any]) -> None:
        if delta.get("id") and not self.id:
            self.id = delta["id"]
        function = delta.get("function") or {}
        name = function.get("name")
        # Some servers repeat the full name in every delta, others split it: only append new text.
        if name and name != self.name:
            self.name += name
        arguments = function.get("arguments")
        if arguments:
            self.arguments.append(arguments if isinstance(arguments, str) else json.dumps(arguments))

    def build(self) -> FunctionCall:
        return FunctionCall(id=self.id, name=self.name, arguments="".join(self.arguments) or "{}")


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
    ) -> None:
        self._config = OpenAICompatibleClientConfig(
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            model_info=model_info or dict(ANSWER_MODEL_INFO),  # type: ignore[arg-type]
            create_args=dict(create_args or {}),
            headers=dict(headers or {}),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_connections=max_connections,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            max_retry_wait=max_retry_wait,
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
        extra_body = self._config.create_args.get("extra_body") or {}
        self._default_args = {k: v for k, v in self._config.create_args.items() if k != "extra_body"} | extra_body
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._total_usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self._actual_usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self._reasoning_field: ReasoningField | None = None

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
                connector = _Connector(limit=self._config.max_connections, ttl_dns_cache=300)
                self._session = self._new_session(connector)
            else:
                self._session = self._new_session(_shared_pools.acquire(loop, self._origin, self), shared=True)
            self._fresh = None
            self._session_loop = loop
        if not fresh:
            return self._session
        if self._fresh is None or self._fresh.closed:
            self._fresh = self._new_session(_Connector(limit=0, force_close=True, ttl_dns_cache=300))
        return self._fresh

    def _new_session(self, connector: aiohttp.TCPConnector, shared: bool = False) -> aiohttp.ClientSession:
        # Model APIs set no cookies worth keeping; a dummy jar skips cookie handling per request.
        return aiohttp.ClientSession(connector=connector, connector_owner=not shared, timeout=self._timeout,
                                     cookie_jar=aiohttp.DummyCookieJar())

    def _request_body(
        self,
        messages: Sequence[LLMMessage],
        tools: Sequence[Tool | ToolSchema],
        tool_choice: Tool | str,
        json_output: Optional[bool | type[BaseModel]],
        extra_create_args: Mapping[str, Any],
    ) -> bytes:
        body: dict[str, Any] = {"model": self._config.model, "messages": messages_to_openai(messages)}
        body.update(self._default_args)
        if extra_create_args:
            extra_body = extra_create_args.get("extra_body")
            body.update(extra_create_args)
            if extra_body:
                del body["extra_body"]
                body.update(extra_body)
        if tools:
            body.pop("tools", None)  # replaced by the encoded list, spliced in below
            body["tool_choice"] = _tool_choice_to_openai(tool_choice)
        if json_output is True:
            body["response_format"] = {"type": "json_object"}
        elif isinstance(json_output, type):
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": json_output.__name__, "schema": json_output.model_json_schema()},
            }
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        encoded = wire_json.dumps(body)
        if tools:  # the tools, each encoded once, as the body's last field
            encoded = b"%s,\"tools\":%s}" % (encoded[:-1], tools_json(tools).encode())
        return encoded

    async def _open(self, body: bytes, cancellation_token: CancellationToken | None) -> aiohttp.ClientResponse:
        """Sends the request; returns a 200 response (its body unread), or raises. A failure before
        the upstream sent any answer (no connection, 429, 5xx) is retried by the retry policy."""
        model = self._config.model
        retries = 0
        fresh = False
        while True:
            failure: UpstreamError | None = None
            retryable = True
            try:
                response = await self._send(self._url, body, cancellation_token, fresh)
            except aiohttp.ConnectionTimeoutError as exc:
                _forget(exc)
                failure = UpstreamUnreachable(f"cannot be reached: no connection within {self._config.connect_timeout:g}s", model=model)
            except asyncio.TimeoutError as exc:  # connected, but no answer (not retried: it would only wait again)
                _forget(exc)
                failure, retryable = UpstreamTimeout(f"did not answer within {self._config.read_timeout:g}s", model=model), False
            except aiohttp.ClientConnectorError as exc:
                failure = UpstreamUnreachable(f"cannot be reached: {_describe(exc)}", model=model)
                _forget(exc)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                failure = UpstreamConnectionError(f"closed the connection without answering: {_describe(exc)}", model=model)
                _forget(exc)
                if not fresh:
                    # Most likely a pooled keep-alive connection the server closed just as it was
                    # reused: try again at once, on a new connection (the pool may hold more such).
                    fresh = True
                    continue
            except aiohttp.ClientError as exc:
                failure, retryable = UpstreamConnectionError(f"failed: {_describe(exc)}", model=model), False
                _forget(exc)
            else:
                if response.status == 200:
                    return response
                failure = await self._status_error(response)
                status = failure.upstream_status or 0
                retryable = status == 429 or status >= 500
            delay = self._retry_delay(failure, retries) if retryable else None
            if delay is None:
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
        data: bytes | _SentBody = body if sent is None and cancellation_token is None else _SentBody(body, sent, cancellation_token)
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
            canceller = _Canceller(task)
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
        _lighten(response)
        if cancellation_token is not None:
            # Closing the response aborts a read at once and drops the connection, so the
            # upstream stops generating; no task per chunk is needed.
            cancellation_token.add_callback(functools.partial(_abort_read, weakref.ref(response)))
        return response

    def _retry_delay(self, failure: UpstreamError, retries: int) -> float | None:
        """Seconds to wait before the next try, or ``None`` to give up and pass ``failure`` on."""
        if retries >= self._config.max_retries:
            return None
        retry_after = _retry_after_seconds(failure.retry_after)
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
            raw, _ = await _read_bounded(response, MAX_ERROR_BODY)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            _forget(exc)
            raw = b""
        finally:
            response.release()
        status = response.status
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else None
        fields = error_fields(error, status)
        text = upstream_error_text(raw, status)
        if parsed is None and response.content_type == "text/html":
            text = "an HTML error page"  # a proxy's page: markup, not a message
        return UpstreamStatusError(
            f"answered HTTP {status}: {text}",
            model=self._config.model,
            upstream_status=status,
            retry_after=response.headers.get("Retry-After"),
            **fields,
        )

    def _error_object(self, error: Any, where: str) -> UpstreamStatusError:
        """An error object the upstream sent with HTTP 200 (in its stream, or as its JSON body)."""
        status = _status_of(error) if isinstance(error, dict) else None
        fields = error_fields(error, status)
        return UpstreamStatusError(
            f"{where}: {upstream_error_text({'error': error}, status or 200)}",
            model=self._config.model,
            upstream_status=status,
            **fields,
        )

    async def check_ready(self, timeout: float) -> None:
        """Readiness: asks the upstream's ``GET /models`` with this client's headers. Returns when it
        answers 200 within ``timeout`` seconds; raises an :class:`~duet.agents._errors.UpstreamError` otherwise."""
        model = self._config.model
        failure: UpstreamError | None = None
        try:
            async with asyncio.timeout(timeout):
                async with self._get_session().get(self._models_url, headers=self._models_headers) as response:
                    if response.status != 200:
                        failure = await self._status_error(response)
        except asyncio.TimeoutError as exc:
            _forget(exc)
            failure = UpstreamTimeout(f"did not answer GET /models within {timeout:g}s", model=model)
        except aiohttp.ClientConnectorError as exc:
            failure = UpstreamUnreachable(f"cannot be reached: {_describe(exc)}", model=model)
            _forget(exc)
        except aiohttp.ClientError as exc:
            failure = UpstreamConnectionError(f"failed GET /models: {_describe(exc)}", model=model)
            _forget(exc)
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
        body = self._request_body(messages, tools, tool_choice, json_output, extra_create_args)
        response = await self._open(body, cancellation_token)
        del body  # sent: not kept for as long as the answer streams
        model = self._config.model
        content_type = _media_type(response)
        if content_type == "application/json":  # an upstream that ignores "stream": true
            async for item in self._completion_pieces(response, cancellation_token):
                yield item
            return
        if content_type == "text/html":
            raise await self._unexpected_body(response, "an HTML page")

        content = TextParts()
        thought = TextParts()
        details: list[Any] = []  # reasoning_details fragments
        reasoning_field: ReasoningField | None = None
        calls: dict[int, _ToolCallBuilder] = {}
        finish_reason: str | None = None
        usage: Mapping[str, Any] | None = None
        answered = False  # a chunk with a choice arrived
        first_token = True
        pending: list[str] = []  # text of the current read not handed on yet, all of one kind
        pending_kind: type[str] = str
        done = False
        failure: UpstreamError | None = None
        cancelled = False
        try:
            async for events in _sse_data(response, lambda: first_token):
                # The text of one read goes on as few pieces, in order (the model's first token alone,
                # at once; then at most JOINED_CHUNKS chunks or JOINED_CHARS characters a piece): a
                # burst of tokens costs the caller a few events, not one each.
                for data in events:
                    if data == b"[DONE]":
                        done = True
                        break
                    try:
                        chunk = wire_json.loads(data)
                    except ValueError:
                        failure = UpstreamProtocolError(f"sent a chunk that is not JSON: {data[:200]!r}", model=model)
                        break
                    if not isinstance(chunk, dict):
                        failure = UpstreamProtocolError(f"sent a chunk that is not a JSON object: {data[:200]!r}", model=model)
                        break
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    choices = chunk.get("choices")
                    if not choices:
                        error = chunk.get("error") or (chunk if chunk.get("object") == "error" else None)  # OpenAI's shape, vLLM's
                        if error:
                            failure = self._error_object(error, "failed mid-stream" if answered else "sent an error")
                            break
                        continue
                    answered = True
                    choice = choices[0]
                    delta = choice.get("delta") or {}
                    if choice.get("finish_reason"):
                        finish_reason = choice["finish_reason"]
                    reasoning = delta.get("reasoning_content")
                    if reasoning:
                        reasoning_field = reasoning_field or "reasoning_content"
                    else:
                        reasoning = delta.get("reasoning")
                        if reasoning:
                            reasoning_field = reasoning_field or "reasoning"
                    detail_fragments = delta.get("reasoning_details")
                    if detail_fragments and isinstance(detail_fragments, list):
                        details += detail_fragments
                        reasoning_field = "reasoning_details"  # what a model that sends them wants back
                        if not reasoning:  # an upstream that sends only details: their text is the reasoning
                            reasoning = details_text(detail_fragments)
                    if reasoning:
                        thought.append(reasoning)
                        if pending and pending_kind is not ReasoningText:
                            yield "".join(pending)
                            pending.clear()
                        pending_kind = ReasoningText
                        pending.append(reasoning)
                    text = delta.get("content")
                    if text:
                        content.append(text)
                        if pending and pending_kind is not str:
                            yield ReasoningText("".join(pending))
                            pending.clear()
                        pending_kind = str
                        pending.append(text)
                    if first_token and pending:
                        # The first token goes on alone, and the caller's writer gets a turn to send
                        # it before the rest of the burst is parsed: the socket is not even read until
                        # the caller asks for more and that turn has passed (the loop would otherwise
                        # receive and parse what arrived before the writer's turn).
                        first_token = False
                        held = _hold_reading(response)
                        try:
                            yield pending_kind("".join(pending))
                            pending.clear()
                            await asyncio.sleep(0)
                        finally:
                            if held is not None:
                                _release_reading(held)
                    elif len(pending) >= JOINED_CHUNKS or (pending and sum(map(len, pending)) >= JOINED_CHARS):
                        yield pending_kind("".join(pending))
                        pending.clear()
                    tool_deltas = delta.get("tool_calls")
                    if tool_deltas:
                        first_token = False  # a call is handed on whole, at its end: nothing to hurry
                        for tool_delta in tool_deltas:
                            index = tool_delta.get("index")
                            if index is None:
                                index = len(calls) - 1 if calls and not tool_delta.get("id") else len(calls)
                            builder = calls.get(index)
                            if builder is None:
                                builder = calls[index] = _ToolCallBuilder()
                            builder.add(tool_delta)
                if pending:  # what this read brought, before anything is raised
                    yield pending_kind("".join(pending))
                    pending.clear()
                # Nothing of this read stays with the stream while it waits for the next one.
                events = data = chunk = choices = choice = delta = reasoning = text = tool_deltas = detail_fragments = None  # type: ignore[assignment]
                if failure is not None:
                    break
                if done:
                    if not response.content.is_eof():
                        # The body's last bytes (a chunked body's terminator) follow [DONE]: a body
                        # read to its end returns its connection to the pool, one cut short closes it.
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(response.content.wait_eof(), END_OF_BODY_WAIT)
                    break
        except _ReadCancelled as exc:
            exc.__traceback__ = None  # it is referenced by the response: no cycle through this frame
            cancelled = True
        except _EventTooLarge:
            failure = UpstreamProtocolError(f"sent more than {MAX_EVENT_BYTES} bytes without an event separator", model=model)
        except asyncio.TimeoutError as exc:
            _forget(exc)
            failure = UpstreamTimeout(f"went silent for {self._config.read_timeout:g}s mid-stream", model=model)
        except aiohttp.ClientError as exc:
            failure = UpstreamConnectionError(f"broke off the stream: {_describe(exc)}", model=model)
            _forget(exc)
        finally:
            response.release()
        # Raised here, outside the handlers: a new exception never chains the one aiohttp raised.
        if cancelled or (cancellation_token is not None and cancellation_token.is_cancelled()):
            raise asyncio.CancelledError()
        if failure is not None:
            raise failure
        if not answered:
            if content_type != "text/event-stream" and not done:
                raise UpstreamProtocolError(f"answered HTTP 200 with {content_type} that holds no event stream", model=model)
            raise UpstreamProtocolError("ended the stream without an answer (no choices)", model=model)
        if not done and finish_reason is None:
            raise UpstreamConnectionError("ended the stream before the model finished", model=model)
        yield self._result(content.join(), thought.join() or None, calls, finish_reason, usage,
                           reasoning_field, merge_details(details) if details else None)

    async def _unexpected_body(self, response: aiohttp.ClientResponse, what: str) -> UpstreamError:
        """The protocol error for a 200 whose body is not an answer (the response is released)."""
        try:
            raw, _ = await _read_bounded(response, 2000)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            _forget(exc)
            raw = b""
        finally:
            response.release()
        text = " ".join(raw.decode("utf-8", "replace").split())[:200]
        return UpstreamProtocolError(f"answered HTTP 200 with {what} instead of an event stream: {text!r}", model=self._config.model)

    async def _completion_pieces(
        self, response: aiohttp.ClientResponse, cancellation_token: CancellationToken | None
    ) -> AsyncGenerator[Union[str, CreateResult], None]:
        """A plain ``chat.completion`` body as the pieces a stream would have given; an error
        object as the error it stands for."""
        model = self._config.model
        failure: UpstreamError | None = None
        raw, too_long = b"", False
        try:
            raw, too_long = await _read_bounded(response, MAX_JSON_BODY)
        except _ReadCancelled as exc:
            exc.__traceback__ = None
        except asyncio.TimeoutError as exc:
            _forget(exc)
            failure = UpstreamTimeout(f"went silent for {self._config.read_timeout:g}s in its answer", model=model)
        except aiohttp.ClientError as exc:
            failure = UpstreamConnectionError(f"broke off its answer: {_describe(exc)}", model=model)
            _forget(exc)
        finally:
            response.release()
        if cancellation_token is not None and cancellation_token.is_cancelled():
            raise asyncio.CancelledError()
        if failure is not None:
            raise failure
        if too_long:
            raise UpstreamProtocolError(f"answered with a JSON body larger than {MAX_JSON_BODY} bytes", model=model)
        try:
            completion = json.loads(raw)
        except ValueError:
            completion = None
        if isinstance(completion, dict) and (completion.get("error") or completion.get("object") == "error"):
            raise self._error_object(completion.get("error") or completion, "answered HTTP 200 with an error")
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            text = " ".join(raw.decode("utf-8", "replace").split())[:200]
            raise UpstreamProtocolError(f"answered HTTP 200 with JSON that is not a chat completion: {text!r}", model=model)
        message = choices[0].get("message") or {}
        reasoning_field: ReasoningField | None = next(
            (field for field in ("reasoning_content", "reasoning") if message.get(field)), None  # type: ignore[misc]
        )
        reasoning = message.get(reasoning_field) if reasoning_field else ""
        details = message.get("reasoning_details")
        if not (isinstance(details, list) and details):
            details = None
        else:
            reasoning_field = "reasoning_details"
            reasoning = reasoning or details_text(details)
        text = message.get("content") or ""
        calls: dict[int, _ToolCallBuilder] = {}
        for index, call in enumerate(message.get("tool_calls") or []):
            calls[index] = _ToolCallBuilder()
            calls[index].add(call)
        if reasoning:
            yield ReasoningText(reasoning)
        if text:
            yield text
        assert isinstance(completion, dict)
        yield self._result(text, reasoning or None, calls, choices[0].get("finish_reason") or "stop", completion.get("usage"),
                           reasoning_field, details)

    def _result(
        self,
        text: str,
        reasoning: str | None,
        calls: Mapping[int, _ToolCallBuilder],
        finish_reason: str | None,
        usage: Mapping[str, Any] | None,
        reasoning_field: ReasoningField | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> CreateResult:
        if reasoning_field is not None:
            self._reasoning_field = reasoning_field
        reasoning_extras: dict[str, Any] = {
            "reasoning_field": reasoning_field, "reasoning_details": details, "reasoning_tokens": reasoning_tokens(usage),
        }
        request_usage = RequestUsage(
            prompt_tokens=int((usage or {}).get("prompt_tokens") or 0),
            completion_tokens=int((usage or {}).get("completion_tokens") or 0),
        )
        self._total_usage = add_usage(self._total_usage, request_usage)
        self._actual_usage = add_usage(self._actual_usage, request_usage)
        if calls:
            return UpstreamResult(
                finish_reason="function_calls",
                content=[calls[index].build() for index in sorted(calls)],
                usage=request_usage,
                cached=False,
                thought=text or reasoning,
                **reasoning_extras,
            )
        return UpstreamResult(
            finish_reason=_FINISH_REASONS.get(finish_reason or "", "unknown"),  # type: ignore[arg-type]
            content=text,
            usage=request_usage,
            cached=False,
            thought=reasoning,
            **reasoning_extras,
        )

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
            await _shared_pools.release(self._session_loop, self._origin, self)
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
    def capabilities(self) -> ModelCapabilities:  # type: ignore[override]
        return self._config.model_info  # type: ignore[return-value]

    @property
    def model_info(self) -> ModelInfo:
        return self._config.model_info

    def _to_config(self) -> OpenAICompatibleClientConfig:
        return self._config.model_copy(deep=True)

    @classmethod
    def _from_config(cls, config: OpenAICompatibleClientConfig) -> Self:
        return cls(**config.model_dump())


def streaming_create_args(client: ChatCompletionClient, create_args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``extra_create_args`` of a streamed call to ``client``: ``create_args``, plus the request
    for the usage chunk (``stream_options.include_usage``) that AutoGen's OpenAI clients do not send
    by themselves. Duet's own client always sends it; other clients may reject OpenAI's field."""
    if isinstance(client, OpenAICompatibleClient):
        return create_args
    from autogen_ext.models.openai import BaseOpenAIChatCompletionClient  # imported once a client needs it

    if isinstance(client, BaseOpenAIChatCompletionClient):
        return {**create_args, "stream_options": {"include_usage": True}}
    return create_args


def add_usage(a: RequestUsage, b: RequestUsage) -> RequestUsage:
    return RequestUsage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens, completion_tokens=a.completion_tokens + b.completion_tokens
    )
