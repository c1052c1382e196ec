"""Errors as OpenAI error bodies with the right status; never ``{"detail": ...}``, never 200.

How upstream failures map (the same before the stream starts and in a mid-stream error event):

=====================================  ======  =============================================
upstream                               status  ``code`` (``type``)
=====================================  ======  =============================================
404, or "no such model" (configuration)  502     ``upstream_model_not_found``
400 / 413 / 422                        400     the upstream's code, else ``upstream_invalid_request``
429                                    429     the upstream's code, else ``rate_limit_exceeded``; ``Retry-After`` passed on
503 (busy)                             503     ``upstream_overloaded``; ``Retry-After`` passed on
401 / 403 (Duet's upstream key)        502     ``upstream_auth``
other 4xx, 5xx, an error object        502     ``upstream_error`` (or the error object's code)
garbage (HTML, not JSON, no answer)    502     ``upstream_protocol_error``
connection broken off                  502     ``upstream_disconnected``
cannot connect                         503     ``upstream_unavailable``
silence past the read timeout          504     ``upstream_timeout``
=====================================  ======  =============================================

Statuses after Duet's own retries (502 for an upstream 5xx or its credentials, 503, a 429 Duet already
retried) carry ``x-should-retry: false``, so the openai and anthropic SDKs do not multiply the calls; a
429 passed on at once carries ``x-should-retry: true`` (the retry reuses the reasoning already paid for).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable, Mapping, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from duet.agents import (
    DEFAULT_BASE_URL,
    ConversationError,
    DuetError,
    UpstreamError,
    UpstreamModelNotFound,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnreachable,
    mask_secrets,
    register_secrets,
    upstream_error_from_openai,
)

from duet.api._wire import ErrorBody, ErrorDetail

logger = logging.getLogger(__name__)


class APIError(DuetError):
    """An error the client gets as ``{"error": {...}}`` with HTTP ``status`` (and ``headers``, such
    as ``Retry-After``). Configured secrets are masked out of the message."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message = mask_secrets(message)
        super().__init__(message)
        self.status = status
        self.headers = headers
        self.detail = ErrorDetail(message=message, type=type, param=param, code=code)

    def body(self) -> dict[str, object]:
        return ErrorBody(error=self.detail).model_dump()

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        merged = {**self.headers, **(headers or {})} if self.headers else headers
        return JSONResponse(self.body(), status_code=self.status, headers=merged)


SHOULD_RETRY = "x-should-retry"
"""The header the openai and anthropic SDKs obey over their own retry rules."""
NO_RETRY = {SHOULD_RETRY: "false"}
"""On an upstream failure Duet already retried (5xx, unreachable) or that a retry cannot mend (its credentials):
the client's SDK does not multiply the calls again."""

UPSTREAM_CLIENT_ERRORS = (400, 413, 422)
"""Upstream statuses that mean the request itself was refused (too long a context, ...): the client's 400."""


BASE_URL_VARIABLES = {"reasoning model": "DUET_REASONER_BASE_URL", "answer model": "DUET_ANSWER_BASE_URL"}
"""The variable that sets each stage's server (a team's agents have only their team file)."""


def what_to_do(base_url: str, models: Iterable[str], variables: Iterable[str]) -> str:
    """What an operator does about a server at ``base_url`` that does not answer (startup and the
    first request say the same)."""
    settings = " / ".join(variables) or "the pipeline's base_url"
    if base_url == DEFAULT_BASE_URL:
        pulls = " && ".join(f"ollama pull {model}" for model in models)
        return f"start Ollama (ollama serve) and pull the models ({pulls}), or set {settings}"
    return f"start the server there, or set {settings} (or the pipeline's base_url) to one that answers"


def unreachable_message(exc: UpstreamError) -> str:
    """An unreachable upstream's message with what to do. The URL tried is named only when it is Ollama's
    default (the first run without Ollama): a configured one is the operator's, named in the server's log
    (an upstream failure never shows a client the upstream's URL)."""
    if exc.base_url is None:
        return exc.message
    variable = BASE_URL_VARIABLES.get(exc.stage)
    advice = what_to_do(exc.base_url, [exc.model or ""], [variable] if variable else [])
    if exc.base_url == DEFAULT_BASE_URL:
        return f"{exc.message} (tried {exc.base_url}, Ollama's default): {advice}"
    return f"{exc.message} (the URL tried is in the server's log): {advice}"


def upstream_api_error(exc: UpstreamError) -> APIError:
    """The status and body an upstream failure maps to (the table in this module's docstring)."""
    status = exc.upstream_status
    if isinstance(exc, UpstreamTimeout):
        return APIError(504, exc.message, type="upstream_error", code="upstream_timeout")
    if isinstance(exc, UpstreamUnreachable):  # Duet already retried connecting: a client's retries would only multiply
        return APIError(503, unreachable_message(exc), type="upstream_error", code="upstream_unavailable", headers=NO_RETRY)
    if isinstance(exc, UpstreamProtocolError):
        return APIError(502, exc.message, type="upstream_error", code="upstream_protocol_error")
    if isinstance(exc, UpstreamModelNotFound):  # Duet's configuration names a model the upstream does not serve
        return APIError(502, f"{exc.message} (check the pipeline's model name)", type="upstream_error",
                        code="upstream_model_not_found")
    if isinstance(exc, UpstreamStatusError):
        if status in UPSTREAM_CLIENT_ERRORS:
            return APIError(400, exc.message, type=exc.error_type or "invalid_request_error", param=exc.param,
                            code=exc.code or "upstream_invalid_request")
        if status == 429:
            # Passed on at once, a retry after Retry-After is cheap (the reasoning it repeats is reused); after
            # Duet's own retries, the client's would multiply them.
            headers = {"Retry-After": exc.retry_after} if exc.retry_after else {}
            headers[SHOULD_RETRY] = "false" if exc.retries else "true"
            return APIError(429, exc.message, type=exc.error_type or "rate_limit_error", code=exc.code or "rate_limit_exceeded",
                            headers=headers)
        if status == 503:  # busy (Ollama's queue is full, a provider is overloaded): the client may come back
            headers = {"Retry-After": exc.retry_after} if exc.retry_after else {}
            headers[SHOULD_RETRY] = "false" if exc.retries else "true"
            return APIError(503, exc.message, type="upstream_error", code="upstream_overloaded", headers=headers)
        if status in (401, 403):  # Duet's own upstream credentials: never a 401 that blames the client's key
            return APIError(502, exc.message, type="upstream_error", code="upstream_auth", headers=NO_RETRY)
        code = exc.code if status is None and exc.code else "upstream_error"
        return APIError(502, exc.message, type="upstream_error", code=code, headers=NO_RETRY if status else None)
    return APIError(502, exc.message, type="upstream_error", code="upstream_disconnected")


def as_api_error(exc: BaseException) -> APIError:
    """The status and body a failure maps to."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ConversationError):
        return APIError(400, str(exc), param=exc.param, code="invalid_message")
    if isinstance(exc, UpstreamError):
        return upstream_api_error(exc)
    converted = upstream_error_from_openai(exc, None)  # AutoGen's OpenAIChatCompletionClient outside a Duet agent
    if converted is not None:
        return upstream_api_error(converted)
    if isinstance(exc, asyncio.TimeoutError):
        return APIError(504, "the duet did not finish in time", type="upstream_error", code="upstream_timeout")
    if isinstance(exc, asyncio.CancelledError):
        return APIError(499, "the request was cancelled", type="server_error", code="cancelled")
    if isinstance(exc, ClientDisconnect):  # the client hung up while sending its request: nobody to answer
        return APIError(499, "the client closed the connection", type="invalid_request_error", code="client_disconnected")
    # Anything else is a bug: the details (a traceback, paths) go to the log, not to the client.
    logger.error("unexpected error", exc_info=exc)
    return APIError(500, f"internal error ({type(exc).__name__}); details are in the server log", type="server_error",
                    code="internal_error")


_masking_installed = False


def install_secret_masking(api_keys: Iterable[str] = ()) -> None:
    """Masks configured secrets (``api_keys``, and every upstream key and header value the model
    clients registered) in every log record, whichever logger or handler it goes through."""
    global _masking_installed
    register_secrets(api_keys)
    if _masking_installed:
        return
    _masking_installed = True
    make_record = logging.getLogRecordFactory()
    formatter = logging.Formatter()

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is reported by the handler, as always
            return record
        masked = mask_secrets(message)
        if masked is not message:
            # Masked piece by piece first: some formatters read the arguments (uvicorn's access log does).
            if isinstance(record.msg, str):
                record.msg = mask_secrets(record.msg)
            if isinstance(record.args, tuple):
                record.args = tuple(mask_secrets(arg) if isinstance(arg, str) else arg for arg in record.args)
            if record.getMessage() != masked:  # a secret inside an argument that is not a string
                record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[1] is not None:  # the traceback text holds exception messages
            record.exc_text = mask_secrets(formatter.formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(masked_record)


ErrorShape = Callable[[APIError, Optional[dict[str, str]]], Response]
"""A protocol's error body for an :class:`APIError` (and extra headers): its ``error_response``."""


def _openai_shape(error: APIError, headers: dict[str, str] | None) -> Response:
    return error.response(headers=headers)


def install_error_handlers(app: FastAPI, shapes: Mapping[str, ErrorShape] | None = None) -> None:
    """Every error FastAPI or Starlette would render their own way (an unknown path, a method the
    path does not take, a bug) gets the shape of the protocol whose path it is: ``shapes`` by path
    prefix (``/v1/messages`` and every path under it: Anthropic's), else OpenAI's."""
    prefixes = tuple((prefix, prefix + "/", shape) for prefix, shape in (shapes or {}).items())

    def respond(request: Request, error: APIError, headers: dict[str, str] | None = None) -> Response:
        path, root = request.scope.get("path", ""), request.scope.get("root_path", "")
        path = path[len(root):] if root and path.startswith(root) else path  # the route's path, as the router matches it
        for prefix, under, shape in prefixes:
            if path == prefix or path.startswith(under):
                return shape(error, headers)
        return _openai_shape(error, headers)

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> Response:
        return respond(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return respond(request, APIError(exc.status_code, str(exc.detail), code=code), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or None
        return respond(request, APIError(400, str(first.get("msg")), param=param, code="invalid_request"))

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> Response:
        return respond(request, as_api_error(exc))
