"""What an upstream's failures stand for: its error answers (a status and a body, an error object in
a stream or a JSON body, ``Retry-After``) and the failures of its connection, as
:class:`~duet.agents._errors.UpstreamError` subclasses that name the model, never the URL."""

from __future__ import annotations

import asyncio
import json
import os
from email.utils import parsedate_to_datetime
from time import time as wall_clock
from typing import Any, Literal, Mapping

import aiohttp

from duet.agents._errors import (
    UpstreamConnectionError,
    UpstreamError,
    UpstreamModelNotFound,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnreachable,
    error_fields,
    model_not_found,
    upstream_error_text,
)
from duet.agents.upstream._sse import MAX_EVENT_BYTES, EventTooLarge
from duet.agents.upstream._transport import forget

Retry = Literal["no", "later", "on a new connection"]
"""Whether a request that failed before any answer is tried again: not, by the retry policy, or at once
on a new connection (the pooled one was closed by the server as it was reused)."""


def describe(exc: BaseException) -> str:
    """What went wrong on the connection, in words that name no host and no URL.

    >>> describe(aiohttp.ServerDisconnectedError()), describe(ConnectionRefusedError(111, "x"))
    ('the server closed the connection', 'connection refused')
    """
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


def send_failure(exc: BaseException, model: str, connect_timeout: float, read_timeout: float,
                 base_url: str | None = None) -> tuple[UpstreamError, Retry]:
    """The error a request that got no answer stands for (``exc``, from aiohttp, is forgotten), and
    whether it is tried again."""
    forget(exc)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamUnreachable(f"cannot be reached: no connection within {connect_timeout:g}s", model=model,
                                   base_url=base_url), "later"
    if isinstance(exc, asyncio.TimeoutError):  # connected, but no answer (not retried: it would only wait again)
        return UpstreamTimeout(f"did not answer within {read_timeout:g}s", model=model), "no"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnreachable(f"cannot be reached: {describe(exc)}", model=model, base_url=base_url), "later"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        # Most likely a pooled keep-alive connection the server closed just as it was reused.
        failure = UpstreamConnectionError(f"closed the connection without answering: {describe(exc)}", model=model)
        return failure, "on a new connection"
    return UpstreamConnectionError(f"failed: {describe(exc)}", model=model), "no"


def read_failure(exc: BaseException, model: str, read_timeout: float, streamed: bool) -> UpstreamError:
    """The error a failed read of an answer's body stands for (a stream's, or a plain JSON body's);
    ``exc`` is forgotten."""
    forget(exc)
    if isinstance(exc, EventTooLarge):
        return UpstreamProtocolError(f"sent more than {MAX_EVENT_BYTES} bytes without an event separator", model=model)
    if isinstance(exc, asyncio.TimeoutError):
        return UpstreamTimeout(f"went silent for {read_timeout:g}s {'mid-stream' if streamed else 'in its answer'}", model=model)
    return UpstreamConnectionError(f"broke off {'the stream' if streamed else 'its answer'}: {describe(exc)}", model=model)


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header (seconds or an HTTP date) in seconds from now.

    >>> retry_after_seconds("2.5"), retry_after_seconds("Thu, 01 Jan 1970 00:00:00 GMT"), retry_after_seconds("soon")
    (2.5, 0.0, None)
    """
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


def status_of(error: Mapping[str, Any]) -> int | None:
    """An HTTP status some servers put into an error object's ``code`` or ``status``.

    >>> status_of({"code": 429, "message": "slow down"}), status_of({"code": "rate_limited"})
    (429, None)
    """
    for key in ("status", "code"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value < 600:
            return value
    return None


def status_error(raw: bytes, status: int, content_type: str, retry_after: str | None, model: str) -> UpstreamStatusError:
    """The error an upstream's non-200 answer stands for: its status, its body (``raw``, bounded),
    and its ``Retry-After`` header.

    >>> error = status_error(b'{"error": {"message": "Slow down.", "code": "rate_limit"}}', 429, "application/json", "3", "m")
    >>> str(error), error.code, error.retry_after
    ('model m answered HTTP 429: Slow down.', 'rate_limit', '3')
    """
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, list) and parsed and isinstance(parsed[0], dict):
        parsed = parsed[0]  # Gemini's OpenAI-compatible endpoint: an array of one error object
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else None
    fields = error_fields(error, status)
    text = upstream_error_text(parsed if isinstance(parsed, dict) else raw, status)
    if parsed is None and content_type == "text/html":
        text = "an HTML error page"  # a proxy's page: markup, not a message
    kind = UpstreamModelNotFound if model_not_found(status, fields, text) else UpstreamStatusError
    return kind(f"answered HTTP {status}: {text}", model=model, upstream_status=status, retry_after=retry_after, **fields)




def error_object(error: Any, where: str, model: str) -> UpstreamStatusError:
    """An error object the upstream sent with HTTP 200 (in its stream, or as its JSON body); ``where``
    says when ("sent an error", "failed mid-stream", ...)."""
    status = status_of(error) if isinstance(error, dict) else None
    fields = error_fields(error, status)
    return UpstreamStatusError(
        f"{where}: {upstream_error_text({'error': error}, status or 200)}", model=model, upstream_status=status, **fields
    )


def unlisted_model(raw: bytes, model: str) -> UpstreamModelNotFound | None:
    """The error of a ``GET /models`` answer (``raw``) whose list does not hold ``model``; ``None``
    when it does, or when the answer is no list (some servers answer otherwise: nothing to check).
    Gemini names its models ``models/<name>``.

    >>> unlisted_model(b'{"data": [{"id": "models/gemini-2.5-flash"}]}', "gemini-2.5-flash") is None
    True
    >>> str(unlisted_model(b'{"object": "list", "data": [{"id": "llama3"}]}', "qwen3:8b"))
    'model qwen3:8b is not among the models the upstream lists (1: llama3)'
    """
    try:
        listed = json.loads(raw).get("data")
        ids = [entry.get("id") for entry in listed if isinstance(entry, dict)]
    except (ValueError, AttributeError, TypeError):
        return None
    if model in ids or f"models/{model}" in ids:
        return None
    shown = ", ".join(str(i) for i in ids[:10]) + (", …" if len(ids) > 10 else "")
    return UpstreamModelNotFound(f"is not among the models the upstream lists ({len(ids)}: {shown})", model=model,
                                 upstream_status=404, code="model_not_found")


def not_an_answer(raw: bytes, what: str, model: str) -> UpstreamProtocolError:
    """The error of a 200 whose body (``raw``, its start) is ``what`` instead of an event stream."""
    text = " ".join(raw.decode("utf-8", "replace").split())[:200]
    return UpstreamProtocolError(f"answered HTTP 200 with {what} instead of an event stream: {text!r}", model=model)
