"""Clients that hang up at a chosen point of a request, over raw sockets (the point is the socket).

Used by the leak test (``tests/http/test_leaks.py``) and the memory benchmark (``bench/abort_memory.py``).
A pipeline serving these needs the scripted upstream answering with :func:`abort_responder` and
the service tool :func:`slow_lookup`; the user message names the point at which the client leaves:

- ``before_first_byte``: the reasoning model is still silent; Duet has written nothing yet;
- ``reasoning``: the reasoning streams;
- ``answer``: the answer streams;
- ``service_tool``: a service tool runs;
- ``non_stream``: a non-streamed request, while the reasoning model works.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.scripted_upstream import Reply, ScriptedCall, users_words
from duet.workbenches import service_tool

ABORT_POINTS = ("before_first_byte", "reasoning", "answer", "service_tool", "non_stream")

# What the client reads before it hangs up (None: it waits a moment without reading).
_READ_UNTIL: dict[str, bytes | None] = {
    "before_first_byte": None,
    "reasoning": b'"reasoning_content":"step',
    "answer": b'"content":"word',
    "service_tool": b"[calling slow_lookup",
    "non_stream": None,
}


@service_tool(timeout=5)
async def slow_lookup(query: str) -> str:
    """Looks something up, slowly (a client hangs up meanwhile)."""
    await asyncio.sleep(1.0)
    return f"found {query}"


@service_tool(timeout=5)
async def frozen_lookup(query: str) -> str:
    """Looks something up while holding the event loop (CPU-bound work, or a server too busy to read
    its connections): a client that hangs up meanwhile is read only after it returns."""
    time.sleep(0.5)  # noqa: ASYNC251 - holds the event loop on purpose
    return f"found {query}"


PROBE = "probe"
"""In a user message: a quick answer (a request that measures how long others wait)."""
LONG_STORY = "long_story"
"""In a user message: a quick reasoning, then a long answer (~350 KB of text in 40 pieces, 0.1 s apart)."""


def abort_responder(body: dict[str, Any]) -> Reply:
    """The scripted upstream's answers: slow where the client is meant to leave."""
    messages = body.get("messages", [])
    # The user's own words: the reasoning Duet appends to the user's message names no abort point.
    last = json.dumps([{**m, "content": users_words(m["content"])} if isinstance(m.get("content"), str) else m for m in messages[-1:]])
    reasoner = "r1" in body.get("model", "")
    if PROBE in last or LONG_STORY in last:
        if reasoner:
            return Reply(reasoning=["quick."])
        if PROBE in last:
            return Reply(content=["ok"])
        piece = "".join(f"word{i} " for i in range(1000))
        return Reply(content=[piece] * 40, delay_between=0.1)
    point = next((p for p in ABORT_POINTS if p in last), "answer")
    if any(m.get("role") == "tool" for m in messages):
        return Reply(content=["done"])
    if reasoner:
        if point == "before_first_byte":
            return Reply(reasoning=["late"], delay=30)
        if point in ("reasoning", "non_stream"):
            return Reply(reasoning=[f"step{i} " for i in range(100)], delay_between=0.02)
        return Reply(reasoning=["quick."])
    if point == "service_tool":
        return Reply(tool_calls=[ScriptedCall("slow_lookup", '{"query": "x"}')])
    return Reply(content=[f"word{i} " for i in range(100)], delay_between=0.02)


PROTOCOLS = ("chat", "responses", "messages")
"""Chat Completions, the Responses API, Anthropic Messages."""

# What each protocol's stream shows at each point: the Responses API's deltas carry their text as
# "delta", Anthropic's as "thinking" (the reasoning) and "text".
_READ_UNTIL_BY_PROTOCOL: dict[str, dict[str, bytes | None]] = {
    "chat": _READ_UNTIL,
    "responses": {**_READ_UNTIL, "reasoning": b'"delta":"step', "answer": b'"delta":"word'},
    "messages": {**_READ_UNTIL, "reasoning": b'"thinking":"step', "answer": b'"text":"word'},
}


def protocol_request(protocol: str, text: str, stream: bool, api_key: str = "", model: str = "duet") -> bytes:
    """A whole HTTP/1.1 request of one user message ``text`` in ``protocol`` (one of :data:`PROTOCOLS`)."""
    if protocol == "responses":
        path, body = "/v1/responses", {"model": model, "stream": stream, "input": text}
    elif protocol == "messages":
        path, body = "/v1/messages", {"model": model, "stream": stream, "max_tokens": 1024,
                                      "messages": [{"role": "user", "content": text}]}
    else:
        path, body = "/v1/chat/completions", {"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]}
    raw = json.dumps(body).encode()
    auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: duet\r\n{auth}"
        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw


def _request(model: str, point: str, api_key: str, protocol: str = "chat") -> bytes:
    return protocol_request(protocol, point, point != "non_stream", api_key, model)


def read_until(protocol: str, point: str) -> bytes | None:
    """What a client of ``protocol`` reads before it hangs up at ``point`` (None: nothing)."""
    return _READ_UNTIL_BY_PROTOCOL[protocol][point]


async def abort_once(port: int, model: str, point: str, api_key: str, timeout: float = 10.0, protocol: str = "chat") -> None:
    """Sends one request (in any of :data:`PROTOCOLS`) and hangs up at ``point``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_request(model, point, api_key, protocol))
        await writer.drain()
        marker = read_until(protocol, point)
        if marker is None:
            await asyncio.sleep(0.05)  # the subject: a hang-up just after the request, before any answer
            return
        received = b""
        async with asyncio.timeout(timeout):
            while marker not in received:
                data = await reader.read(65536)
                if not data:
                    raise AssertionError(f"the server closed the stream before {point!r}: {received[-500:]!r}")
                received = received[-len(marker) - 65536 :] + data
    finally:
        writer.transport.abort()  # a hang-up, not a polite close


async def abort_many(port: int, model: str, count: int, api_key: str, concurrency: int = 16, protocol: str = "chat") -> None:
    """``count`` hang-ups, spread evenly over every point, ``concurrency`` at a time."""
    points = [ABORT_POINTS[i % len(ABORT_POINTS)] for i in range(count)]
    gate = asyncio.Semaphore(concurrency)

    async def one(point: str) -> None:
        async with gate:
            await abort_once(port, model, point, api_key, protocol=protocol)

    await asyncio.gather(*(one(point) for point in points))
