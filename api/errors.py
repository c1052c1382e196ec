"""Errors as OpenAI error bodies with the right status; never ``{"detail": ...}``, never 200."""

from __future__ import annotations

import asyncio
import logging

import openai

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from agents import ConversationError, UpstreamError, UpstreamProtocolError, UpstreamStatusError, UpstreamTimeout

from .protocol import ErrorBody, ErrorDetail

logger = logging.getLogger(__name__)


class APIError(Exception):
    """An error the client gets as ``{"error": {...}}`` with HTTP ``status``."""

    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.detail = ErrorDetail(message=message, type=type, param=param, code=code)

    def body(self) -> dict[str, object]:
        return ErrorBody(error=self.detail).model_dump()

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def as_api_error(exc: BaseException) -> APIError:
    """The status and body a failure maps to."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ConversationError):
        return APIError(400, str(exc), param=exc.param, code="invalid_message")
    if isinstance(exc, UpstreamTimeout):
        return APIError(504, exc.message, type="upstream_error", code="upstream_timeout")
    if isinstance(exc, (UpstreamStatusError, UpstreamProtocolError)):
        return APIError(502, exc.message, type="upstream_error", code="upstream_error")
    if isinstance(exc, UpstreamError):
        return APIError(502, exc.message, type="upstream_error", code="upstream_unavailable")
    if isinstance(exc, openai.APITimeoutError):  # pipelines on AutoGen's OpenAIChatCompletionClient
        return APIError(504, f"the upstream model timed out: {exc}", type="upstream_error", code="upstream_timeout")
    if isinstance(exc, openai.APIStatusError):
        return APIError(502, f"the upstream model answered HTTP {exc.status_code}: {exc.message}", type="upstream_error",
                        code="upstream_error")
    if isinstance(exc, openai.APIConnectionError):
        return APIError(502, f"cannot reach the upstream model: {exc}", type="upstream_error", code="upstream_unavailable")
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


def install_error_handlers(app: FastAPI) -> None:
    """Every error FastAPI or Starlette would render their own way gets the OpenAI shape."""

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return APIError(exc.status_code, str(exc.detail), code=code).response(headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or None
        return APIError(400, str(first.get("msg")), param=param, code="invalid_request").response()

    @app.exception_handler(Exception)
    async def unexpected_error(_: Request, exc: Exception) -> JSONResponse:
        return as_api_error(exc).response()
