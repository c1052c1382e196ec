"""A scripted OpenAI-compatible model server for tests and benchmarks.

Real sockets, real HTTP/1.1, real SSE: ``POST /v1/chat/completions`` answers from a script
(:class:`Reply` objects queued per model, or a function of the request), streams
``reasoning_content`` and content deltas, splits tool-call arguments into pieces, and injects
faults on demand (HTTP errors with any code, type, param and headers, an error that echoes the
caller's key, a dropped connection mid-stream, a stall before or during the answer, an error event,
garbage, and 200s that are not a stream: an HTML page, a plain JSON completion or error, only
``[DONE]``). A model can be made a thinking model that wants its reasoning back, as DeepSeek's
thinking mode does (:meth:`ScriptedUpstream.require_reasoning_back`): a request whose assistant
tool-call message lacks it gets DeepSeek's HTTP 400. Reasoning is streamed in any of the fields
upstreams use (``reasoning_content``, ``reasoning``, ``reasoning_details``), and the usage counts it
in ``completion_tokens_details.reasoning_tokens``.
Every request is recorded, including whether the client hung up before the answer ended, and when
the upstream saw it hang up (at once: the connection's end wakes the stream, it is not polled for).

It runs on its own event loop in a background thread, so synchronous clients (the ``openai`` SDK,
Dify's ``requests``-based client) and the service under test can all talk to it::

    with ScriptedUpstream() as upstream:
        upstream.script("qwen", Reply(content=["Hel", "lo"]))
        ...  # point a client at upstream.base_url

``python -m tests.scripted_upstream --port 9000`` serves a fixed answer (benchmarks): reasoning for a
reasoning model, else content, or a call of the first tool when the last user message has
:data:`BENCH_TOOL_CALL_MARK` and the request has tools.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Sequence

from tests.openai_rules import refusal

Fault = Literal["disconnect", "stall", "error_event", "garbage", "stall_after_done"]  # the last: [DONE], then a body that never ends
Body = Literal["html", "completion", "only_done", "error_object"]


@dataclass
class ScriptedCall:
    """One tool call the scripted model makes; ``arguments`` is sent in ``pieces`` fragments."""

    name: str
    arguments: str
    id: str | None = None
    pieces: int = 3


@dataclass
class Reply:
    """What the scripted model answers to one request."""

    reasoning: Sequence[str] = ()
    content: Sequence[str] = ()
    tool_calls: Sequence[ScriptedCall] = ()
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    usage: tuple[int, int] | None = None  # (prompt, completion); default computed from the request
    cached_tokens: int = 0  # of the prompt tokens, those read from a prompt cache (prompt_tokens_details.cached_tokens)
    reasoning_field: str = "reasoning_content"  # or "reasoning", or "reasoning_details" (OpenRouter's structured form)
    status: int = 200
    error_message: str = "scripted failure"
    error_code: str | int | None = None  # the error object's "code" (default: the HTTP status)
    error_type: str = "scripted"
    error_param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers (e.g. Retry-After)
    echo_key: bool = False  # put the request's Authorization header into the error message (a careless upstream)
    body: Body | None = None  # a 200 that is not a stream: an HTML page, a plain chat.completion, an error object; or only [DONE]
    delay: float = 0.0  # before the response starts
    hold: threading.Event | None = None  # before the response starts, until set (at most HOLD_TIMEOUT) or the client hangs up
    delay_between: float = 0.0  # between two chunks
    model_pace: bool = False  # delay_between only before a token or the finish: as a model server writes (role + first token together; finish, usage, [DONE] together)
    fault: Fault | None = None
    fault_after: int = 0  # chunks sent before the fault
    interleave_calls: bool = False  # send parallel calls' fragments interleaved (index-keyed)
    crlf: bool = False  # end SSE lines with \r\n (sse-starlette's default)
    drop_connection: bool = False  # close the connection without answering (a stale keep-alive connection)


@dataclass
class RecordedRequest:
    model: str
    body: dict[str, Any]
    raw: bytes
    headers: dict[str, str]
    received_at: float
    finished_at: float | None = None
    aborted: bool = False  # the client hung up before the answer ended
    peer_port: int = 0  # the client's port: a new port is a new connection
    ended: threading.Event = field(default_factory=threading.Event)
    bytes_written: int = 0  # of the streamed body, handed to the socket so far
    stalled_since: float | None = None  # a write has waited since then for the client to take it (monotonic)
    longest_stall: float = 0.0  # the longest such wait, in seconds, once it ended
    refused: str | None = None  # why OpenAI would refuse this request (with enforce_openai_rules): it was answered 400

    def stalled_for(self) -> float:
        """How long the write now waiting for the client has waited (0 when none waits)."""
        since = self.stalled_since
        return time.monotonic() - since if since is not None else 0.0


Responder = Callable[[dict[str, Any]], Reply]


def default_responder(body: dict[str, Any]) -> Reply:
    """Reasoning models ("r1"/"reason" in the name) think; others echo the last user message."""
    model = body.get("model", "")
    if "r1" in model or "reason" in model:
        return Reply(reasoning=["Thinking ", "about ", "it."])
    last = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {})
    text = users_words(last.get("content") if isinstance(last.get("content"), str) else "ok")
    return Reply(content=["echo: ", text or ""])


DUET_NOTES = ("\n\n<reasoning>\n", "\n\nRetrieved context: ")
"""How the notes Duet appends to a user message in the answer model's prompt begin."""


def users_words(content: str | None) -> str:
    """A user message's text as the user wrote it: without the note (reasoning, retrieved context)
    Duet appends to it in the answer model's prompt."""
    text = content or ""
    for note in DUET_NOTES:
        text = text.split(note, 1)[0]
    return text


class ScriptedUpstream:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, responder: Responder = default_responder,
                 on_request: Callable[[str, RecordedRequest], None] | None = None) -> None:
        """``on_request`` is told of each completions request when it has ``"arrived"`` and when it
        has ``"ended"`` (answered, or the client gone), on the upstream's thread."""
        self._host = host
        self._port = port
        self._responder = responder
        self._on_request = on_request
        self._scripts: dict[str, collections.deque[Reply | Responder]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self.models_reply: Reply | None = None  # how GET /models answers (its status, delay, ...); None: a list
        self._wants_reasoning_back: dict[str, str] = {}  # model -> the field its tool-call turns must carry
        self._openai_rules = False

    # -- scripting -----------------------------------------------------------------------------
    def script(self, model: str, *replies: Reply | Responder) -> None:
        """Queues answers for ``model``, used in order; then the default responder answers."""
        with self._lock:
            self._scripts[model].extend(replies)

    def require_reasoning_back(self, model: str, field: str = "reasoning_content") -> None:
        """Makes ``model`` refuse, as DeepSeek's thinking mode does (HTTP 400), a request in which an
        assistant message with ``tool_calls`` lacks its reasoning in ``field`` (missing or empty)."""
        with self._lock:
            self._wants_reasoning_back[model] = field

    def enforce_openai_rules(self, enforce: bool = True) -> None:
        """Makes every model refuse, as OpenAI does (HTTP 400 ``invalid_request_error``), a request
        that breaks OpenAI's documented rules (:mod:`tests.openai_rules`); the record says why."""
        self._openai_rules = enforce

    def refused_requests(self) -> list[RecordedRequest]:
        """The requests refused by :meth:`enforce_openai_rules`'s rules."""
        return [r for r in self.requests if r.refused is not None]

    def set_default(self, responder: Responder) -> None:
        self._responder = responder

    def reset(self) -> None:
        with self._lock:
            self._scripts.clear()
            self.requests.clear()
            self._responder = default_responder
            self.models_reply = None
            self._wants_reasoning_back.clear()
            self._openai_rules = False

    def requests_for(self, model: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.model == model]

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            queue = self._scripts.get(body.get("model", ""))
            item = queue.popleft() if queue else self._responder
        return item if isinstance(item, Reply) else item(body)

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    def start(self) -> "ScriptedUpstream":
        started = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(self._loop.create_server(self._protocol, self._host, self._port))
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="scripted-upstream", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._connections):
                writer.close()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(5)

    def __enter__(self) -> "ScriptedUpstream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP ----------------------------------------------------------------------------------
    def _protocol(self) -> asyncio.StreamReaderProtocol:
        """``asyncio.start_server``'s protocol, with a reader that tells when the client has gone."""
        return asyncio.StreamReaderProtocol(_ClosingReader(), self._handle)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        peer_port = writer.get_extra_info("peername")[1]
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    return
                method, path, _ = request_line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    key, _, value = line.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self._respond(method, path, headers, body, reader, writer, peer_port):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._connections.discard(writer)
            writer.close()

    @staticmethod
    def _head(status: int, content_type: str, length: int | None = None, headers: dict[str, str] | None = None) -> bytes:
        reason = {
            200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 413: "Payload Too Large",
            422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable",
        }.get(status, "Error")
        framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        return f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n{framing}\r\n{extra}\r\n".encode()

    async def _respond(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        raw: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer_port: int = 0,
    ) -> bool:
        if method != "POST" or not path.endswith("/chat/completions"):
            return await self._respond_elsewhere(method, path, headers, reader, writer)
        body = json.loads(raw)
        record = RecordedRequest(
            model=body.get("model", ""), body=body, raw=raw, headers=headers, received_at=time.monotonic(), peer_port=peer_port
        )
        self.requests.append(record)
        if self._on_request is not None:
            self._on_request("arrived", record)
        refused = self._refusal(body, record)
        reply = refused or self._missing_reasoning(body) or self._next_reply(body)
        if reply.drop_connection:
            record.aborted = True
            record.ended.set()
            writer.transport.abort()
            return False
        try:
            if reply.delay and await _closed_within(reader, reply.delay):
                record.aborted = True
                return False
            if reply.hold is not None and await _held(reader, reply.hold):
                record.aborted = True
                return False
            if reply.status != 200:
                payload = json.dumps({"error": self._error(reply, headers, reply.status)}).encode()
                writer.write(self._head(reply.status, "application/json", len(payload), reply.headers) + payload)
                await writer.drain()
                return True
            if reply.body is not None:
                await self._odd_body(body, reply, headers, writer)
                return True
            if not body.get("stream"):
                payload = json.dumps(self._completion(body, reply)).encode()
                writer.write(self._head(200, "application/json", len(payload)) + payload)
                await writer.drain()
                return True
            completed = await self._stream(body, reply, reader, writer, record)
            record.aborted = not completed
            return completed
        except ConnectionError:  # the client dropped the connection while a write waited for it
            record.aborted = True
            raise
        finally:
            record.finished_at = time.monotonic()
            record.ended.set()
            if self._on_request is not None:
                self._on_request("ended", record)

    async def _respond_elsewhere(
        self, method: str, path: str, headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """``GET /models`` (as :attr:`models_reply` says), and 404 for any other path."""
        if method == "GET" and path.endswith("/models"):
            reply = self.models_reply or Reply()
            if reply.delay and await _closed_within(reader, reply.delay):
                return False
            if reply.status != 200:
                payload = json.dumps({"error": self._error(reply, headers, reply.status)}).encode()
            else:
                payload = json.dumps({"object": "list", "data": [{"id": model, "object": "model"} for model in self._scripts]}).encode()
            writer.write(self._head(reply.status, "application/json", len(payload), reply.headers) + payload)
            await writer.drain()
            return True
        payload = b'{"error": {"message": "not found"}}'
        writer.write(self._head(404, "application/json", len(payload)) + payload)
        await writer.drain()
        return True

    def _refusal(self, body: dict[str, Any], record: RecordedRequest) -> Reply | None:
        """OpenAI's 400 for a request its documented rules refuse (with :meth:`enforce_openai_rules`)."""
        if not self._openai_rules:
            return None
        record.refused = refusal(body)
        if record.refused is None:
            return None
        return Reply(status=400, error_type="invalid_request_error", error_code="invalid_request_error", error_message=record.refused)

    def _missing_reasoning(self, body: dict[str, Any]) -> Reply | None:
        """DeepSeek's refusal of a thinking-mode request whose tool-call turn lacks its reasoning."""
        field = self._wants_reasoning_back.get(body.get("model", ""))
        if field is None:
            return None
        for index, message in enumerate(body.get("messages") or []):
            if message.get("role") == "assistant" and message.get("tool_calls") and not message.get(field):
                return Reply(status=400, error_type="invalid_request_error", error_code="invalid_request_error",
                             error_message=f"Missing `{field}` field in the assistant message at message index {index}. For more "
                                           "information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls")
        return None

    @staticmethod
    def _error(reply: Reply, headers: dict[str, str], status: int) -> dict[str, Any]:
        message = reply.error_message
        if reply.echo_key:
            message += f" (you sent: {headers.get('authorization', 'no key')})"
        code = reply.error_code if reply.error_code is not None else (status if status != 200 else None)
        return {"message": message, "type": reply.error_type, "param": reply.error_param, "code": code}

    async def _odd_body(self, body: dict[str, Any], reply: Reply, headers: dict[str, str], writer: asyncio.StreamWriter) -> None:
        """A 200 that is not the event stream that was asked for."""
        content_type = "application/json"
        if reply.body == "html":
            payload, content_type = b"<html><head><title>Welcome to nginx</title></head><body>It works.</body></html>", "text/html"
        elif reply.body == "completion":  # an upstream that ignores "stream": true
            payload = json.dumps(self._completion(body, reply)).encode()
        elif reply.body == "error_object":
            payload = json.dumps({"object": "error", **self._error(reply, headers, 200)}).encode()
        else:  # "only_done"
            payload, content_type = b"data: [DONE]\n\n", "text/event-stream"
        writer.write(self._head(200, content_type, len(payload), reply.headers) + payload)
        await writer.drain()

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        if reply.usage is not None:
            prompt, completion = reply.usage
        else:
            prompt = max(1, len(json.dumps(body.get("messages", []))) // 4)
            completion = len(reply.reasoning) + len(reply.content) + len(reply.tool_calls)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if reply.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": min(completion, len(reply.reasoning))}
        if reply.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        return usage

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.content) or None}
        if reply.reasoning:
            text = "".join(reply.reasoning)
            message[reply.reasoning_field] = [{"type": "reasoning.text", "text": text, "index": 0}] if reply.reasoning_field == "reasoning_details" else text
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": call.id or f"call_up{next(self._ids)}", "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in reply.tool_calls
            ]
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        return {
            "id": f"chatcmpl-up{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(body, reply),
        }

    def _events(self, body: dict[str, Any], reply: Reply) -> Iterator[dict[str, Any]]:
        """The reply's chunks, made as they are sent (a long reply is never held whole)."""
        base = {"id": f"chatcmpl-up{next(self._ids)}", "object": "chat.completion.chunk", "created": int(time.time()), "model": body.get("model", "")}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        for piece in reply.reasoning:
            if reply.reasoning_field == "reasoning_details":  # OpenRouter: fragments of one detail, and a signature at its end
                yield chunk({"reasoning_details": [{"type": "reasoning.text", "text": piece, "index": 0, "format": "unknown"}]})
            else:
                yield chunk({reply.reasoning_field: piece})
        if reply.reasoning and reply.reasoning_field == "reasoning_details":
            yield chunk({"reasoning_details": [{"type": "reasoning.text", "text": "", "index": 0, "signature": "sig-scripted"}]})
        for piece in reply.content:
            yield chunk({"content": piece})
        fragments: list[list[dict[str, Any]]] = []
        for index, call in enumerate(reply.tool_calls):
            head = {"index": index, "id": call.id or f"call_up{next(self._ids)}", "type": "function", "function": {"name": call.name, "arguments": ""}}
            size = max(1, -(-len(call.arguments) // max(1, call.pieces)))
            parts = [call.arguments[i : i + size] for i in range(0, len(call.arguments), size)]
            fragments.append([head] + [{"index": index, "function": {"arguments": part}} for part in parts])
        if reply.interleave_calls:
            ordered = [d for group in itertools.zip_longest(*fragments) for d in group if d is not None]
        else:
            ordered = [d for group in fragments for d in group]
        for delta in ordered:
            yield chunk({"tool_calls": [delta]})
        yield chunk({}, reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {**base, "choices": [], "usage": self._usage(body, reply)}

    async def _stream(
        self, body: dict[str, Any], reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: RecordedRequest
    ) -> bool:
        """Streams the reply; returns False when the client hung up first (or a fault ended it).
        Notes in ``record`` how much it wrote, and how long writes waited for the client to read."""
        writer.write(self._head(200, "text/event-stream"))
        end = b"\r\n\r\n" if reply.crlf else b"\n\n"
        for sent, event in enumerate(self._events(body, reply)):
            if reply.fault not in (None, "stall_after_done") and sent == reply.fault_after:
                return await self._fault(reply, reader, writer)
            data = b"data: " + json.dumps(event).encode() + end
            _write_chunk(writer, data)
            record.bytes_written += len(data)
            if writer.transport.get_write_buffer_size():  # the socket did not take it all: the client is behind
                record.stalled_since = time.monotonic()
                await writer.drain()
                record.longest_stall = max(record.longest_stall, time.monotonic() - record.stalled_since)
                record.stalled_since = None
            paced = reply.delay_between and not (reply.model_pace and (sent == 0 or _ends_choices(event)))
            if paced and await _closed_within(reader, reply.delay_between):
                return False
            if _hung_up(reader):
                return False
        _write_chunk(writer, b"data: [DONE]" + end)
        if reply.fault == "stall_after_done":  # the answer is complete, but its body never ends
            await writer.drain()
            await _closed_within(reader, 3600)
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def _fault(self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if reply.fault == "stall":
            await _closed_within(reader, 3600)  # say nothing until the client gives up
            return False
        if reply.fault == "error_event":
            _write_chunk(writer, b'data: {"error": {"message": "' + reply.error_message.encode() + b'", "type": "server_error"}}\n\n')
            _write_chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if reply.fault == "garbage":
            _write_chunk(writer, b"data: {not json\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        writer.transport.abort()  # "disconnect": drop the connection mid-stream
        return False


def _ends_choices(event: dict[str, Any]) -> bool:
    """The finish chunk, or a chunk after it (the usage): what a server writes at once when the model stops."""
    choices = event.get("choices")
    return not choices or choices[0].get("finish_reason") is not None


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def _hung_up(reader: asyncio.StreamReader) -> bool:
    """The client closed its side. Checked without reading, so a pipelined request is never eaten."""
    return reader.at_eof() or reader.exception() is not None


class _ClosingReader(asyncio.StreamReader):
    """A stream reader that tells when its client has closed its side or dropped the connection
    (``closed``), without a read: a pipelined request is never eaten, and a hang-up is seen at once."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = asyncio.Event()

    def feed_eof(self) -> None:
        super().feed_eof()
        self.closed.set()

    def set_exception(self, exc: BaseException) -> None:
        super().set_exception(exc)
        self.closed.set()


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Waits ``seconds``; True as soon as the client hangs up meanwhile."""
    if _hung_up(reader):
        return True
    try:
        async with asyncio.timeout(seconds):
            await reader.closed.wait()  # type: ignore[attr-defined]  # a _ClosingReader (this server's own)
    except TimeoutError:
        return False
    return True


HOLD_TIMEOUT = 60.0
"""Seconds at most a :attr:`Reply.hold` keeps its response back."""


async def _held(reader: asyncio.StreamReader, gate: threading.Event) -> bool:
    """Waits until ``gate`` is set (a test's thread sets it; at most :data:`HOLD_TIMEOUT`); True as
    soon as the client hangs up meanwhile."""
    deadline = time.monotonic() + HOLD_TIMEOUT
    while not gate.is_set() and time.monotonic() < deadline:
        if _hung_up(reader):
            return True
        await asyncio.sleep(0.005)
    return False


BENCH_TOOL_CALL_MARK = "[call a tool]"
"""In the last user message of a benchmark's request with tools: the answer model calls the first tool."""


BENCH_BURST_MARK = "[burst]"
"""In the last user message of a benchmark's request: the upstream writes its tokens back to back,
whatever its ``--delay-between`` (the burst case beside the paced one, on the same servers)."""


def _bench_responder(reasoning_tokens: int, answer_tokens: int, delay_between: float = 0.0) -> Responder:
    """The benchmarks' model: ``delay_between`` seconds between two tokens (a model's pace: see
    :attr:`Reply.model_pace`); a request marked ``[burst]`` gets its tokens back to back."""
    reasoning = [f"thought{i} " for i in range(reasoning_tokens)]
    content = [f"word{i} " for i in range(answer_tokens)]

    def respond(body: dict[str, Any]) -> Reply:
        model = body.get("model", "")
        pace = 0.0 if _last_user_text_has(body, BENCH_BURST_MARK) else delay_between
        if "r1" in model or "reason" in model:
            return Reply(reasoning=reasoning, delay_between=pace, model_pace=True)
        if body.get("tools") and _last_user_text_has(body, BENCH_TOOL_CALL_MARK):
            call = ScriptedCall(body["tools"][0]["function"]["name"], '{"city": "Paris", "days": 3}', pieces=4)
            return Reply(tool_calls=[call], delay_between=pace, model_pace=True)
        return Reply(content=content, delay_between=pace, model_pace=True)

    return respond


def _last_user_text_has(body: dict[str, Any], mark: str) -> bool:
    last = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {})
    return isinstance(last.get("content"), str) and mark in last["content"]


REQUEST_MARK = re.compile(rb"\[\[([A-Za-z0-9_.:-]{1,64})\]\]")
"""A request's name in its text (``[[name]]``), which ``--record`` writes beside each model call."""


def request_recorder(path: str) -> Callable[[str, RecordedRequest], None]:
    """Writes each request's arrival and end as JSON lines to ``path``: the event, the request's
    number, its model, the ``[[name]]`` its text carries, when it arrived and ended
    (``time.monotonic()``: one clock for every process of the machine), and whether its client hung
    up before the answer ended."""
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    numbers: dict[int, int] = {}  # of the requests not ended yet
    counter = itertools.count()

    def record(event: str, request: RecordedRequest) -> None:
        number = numbers.setdefault(id(request), next(counter)) if event == "arrived" else numbers.pop(id(request), -1)
        mark = REQUEST_MARK.search(request.raw)
        out.write(json.dumps({"event": event, "number": number, "model": request.model,
                              "mark": mark.group(1).decode() if mark else None, "received_at": request.received_at,
                              "finished_at": request.finished_at, "aborted": request.aborted, "peer_port": request.peer_port}) + "\n")

    return record


def load_responder(name: str) -> Responder:
    """A responder named ``module:function`` (e.g. ``tests.aborts:abort_responder``)."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the scripted OpenAI-compatible upstream.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--reasoning-tokens", type=int, default=40)
    parser.add_argument("--answer-tokens", type=int, default=40)
    parser.add_argument("--delay-between", type=float, default=0.0, help="seconds between two chunks")
    parser.add_argument("--responder", help="answer with this function (module:function) instead of the fixed answer")
    parser.add_argument("--record", help="append each ended request to this file as a JSON line (request_recorder)")
    args = parser.parse_args()
    if args.responder:
        responder = load_responder(args.responder)
    else:
        responder = _bench_responder(args.reasoning_tokens, args.answer_tokens, args.delay_between)
    recorder = request_recorder(args.record) if args.record else None
    import uvloop  # a server of its own process, as fast as the model servers it stands for (vLLM runs on uvloop)

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    upstream = ScriptedUpstream(args.host, args.port, responder, on_request=recorder).start()
    print(f"scripted upstream on {upstream.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        upstream.stop()


if __name__ == "__main__":
    main()
