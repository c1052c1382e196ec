"""The minimal two-stage relay: the floor Duet is measured against, in the same run.

A hand-written aiohttp server with no validation, no team and no options: for a streamed chat
completion it streams the reasoning model's ``reasoning_content`` to the client, then asks the
answer model with that reasoning in a leading system message (Duet's wording) and the client's
``tools``, and relays its content and ``tool_calls`` deltas as they come, then ``[DONE]``. One
``ClientSession`` (one connection pool) serves the whole process. Streamed requests only.

``python bench/relay.py --port 8001 --upstream http://127.0.0.1:9000/v1 --reasoner bench-r1 --answer bench-answer``
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from typing import Any, AsyncIterator

import aiohttp
from aiohttp import web

PREAMBLE = (
    "A reasoning model has thought this conversation through before you. Use its reasoning to "
    "write your reply (and to decide on tool calls); do not repeat it verbatim.\n<reasoning>\n{reasoning}\n</reasoning>"
)
SESSION = web.AppKey("session", aiohttp.ClientSession)
SETTINGS = web.AppKey("settings", argparse.Namespace)
_ids = itertools.count(1)


async def upstream_deltas(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The first choice of each chunk of one streamed upstream call."""
    async with session.post(url, json=body) as response:
        if response.status != 200:
            raise web.HTTPBadGateway(text=(await response.text())[:1000])
        async for line in response.content:
            if line.startswith(b"data: {"):
                choices = json.loads(line[6:])["choices"]
                if choices:
                    yield choices[0]


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    head = {"id": f"chatcmpl-relay{next(_ids)}", "object": "chat.completion.chunk", "created": int(time.time()), "model": body.get("model", "")}

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(delta: dict[str, Any] | None, finish: str | None = None) -> None:
        """One chunk; ``None``: the end (``[DONE]``)."""
        if delta is None:
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return
        chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        await response.write(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")

    try:
        await stream_stages(request, body, send)
    except ConnectionResetError:  # the client hung up (aiohttp's ClientConnectionResetError is one): nothing to log
        pass
    return response


async def stream_stages(request: web.Request, body: dict[str, Any], send: Any) -> None:
    """The two stages, relayed through ``send``, then ``[DONE]``."""
    settings, session = request.app[SETTINGS], request.app[SESSION]
    url = f"{settings.upstream}/chat/completions"
    messages = body["messages"]
    await send({"role": "assistant", "content": ""})
    reasoning: list[str] = []
    async for choice in upstream_deltas(session, url, {"model": settings.reasoner, "stream": True, "messages": messages}):
        piece = choice["delta"].get("reasoning_content")
        if piece:
            reasoning.append(piece)
            await send({"reasoning_content": piece})

    answer: dict[str, Any] = {"model": settings.answer, "stream": True,
                              "messages": [{"role": "system", "content": PREAMBLE.format(reasoning="".join(reasoning))}, *messages]}
    if body.get("tools"):
        answer["tools"] = body["tools"]
    finish = "stop"
    async for choice in upstream_deltas(session, url, answer):
        delta = choice["delta"]
        if delta.get("content"):
            await send({"content": delta["content"]})
        if delta.get("tool_calls"):
            await send({"tool_calls": delta["tool_calls"]})
        finish = choice.get("finish_reason") or finish
    await send({}, finish)
    await send(None)


async def app_for(settings: argparse.Namespace) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SETTINGS] = settings
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/health", lambda _: web.json_response({"status": "ok"}))

    async def shared_session(app: web.Application) -> AsyncIterator[None]:
        # One pool for the process (unbounded, as Duet's model clients default to); every read has a timeout.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
            app[SESSION] = session
            yield

    app.cleanup_ctx.append(shared_session)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="The minimal two-stage relay (the benchmark's floor).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--upstream", required=True, help="the models' base URL, e.g. http://127.0.0.1:9000/v1")
    parser.add_argument("--reasoner", required=True)
    parser.add_argument("--answer", required=True)
    settings = parser.parse_args()
    try:  # the event loop Duet's uvicorn picks too, so both are measured on the same loop
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    web.run_app(app_for(settings), host=settings.host, port=settings.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
