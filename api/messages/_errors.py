"""Errors in the Anthropic shape: ``{"type": "error", "error": {"type", "message"}}``.

The status is the one :mod:`duet.api._errors` decides (its table of upstream failures holds for every
protocol); the Anthropic ``type`` follows from it, as the Anthropic SDK reads it:

======  =========================  ===================================================
status  ``error.type``             what
======  =========================  ===================================================
400     ``invalid_request_error``  a bad request (also 408, 415, and an upstream's 4xx refusal)
401     ``authentication_error``   no key, or a key this server does not know
403     ``permission_error``
404     ``not_found_error``        an unknown model (pipeline), an unknown path
413     ``request_too_large``      a body over ``max_body_bytes``
429     ``rate_limit_error``       the upstream's 429 (its ``Retry-After`` passed on)
500     ``api_error``              a bug in Duet (details in the server log)
502     ``api_error``              the upstream failed, broke off or answered garbage
503     ``overloaded_error``       Duet at its concurrency limit, shutting down, or the upstream unreachable
504     ``api_error``              the upstream was silent past its read timeout
======  =========================  ===================================================
"""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

from duet.api._errors import APIError
from duet.api.messages._protocol import ErrorBody, ErrorDetail, ErrorType

_TYPES: dict[int, ErrorType] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> ErrorType:
    """The Anthropic ``error.type`` of an HTTP status."""
    known = _TYPES.get(status)
    if known is not None:
        return known
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(error: APIError) -> dict[str, object]:
    """``error`` as an Anthropic error body (its message names the param, as Duet's messages do)."""
    return ErrorBody(error=ErrorDetail(type=error_type(error.status), message=error.detail.message)).model_dump()


def error_response(error: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The HTTP answer to a request that failed before its stream began (the error's ``Retry-After``
    kept, ``headers`` added)."""
    merged = {**error.headers, **(headers or {})} if error.headers else headers
    return JSONResponse(error_body(error), status_code=error.status, headers=merged)


def error_event(error: APIError) -> bytes:
    """The one ``event: error`` a stream that already began ends with."""
    return b"event: error\ndata: " + json.dumps(error_body(error), ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
