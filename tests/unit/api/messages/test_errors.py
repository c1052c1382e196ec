"""The Anthropic Messages protocol's errors (``api/messages/_errors.py``): Duet's errors map to Anthropic's
types and statuses."""

from __future__ import annotations

import pytest
from duet.agents import UpstreamStatusError, UpstreamTimeout, UpstreamUnreachable
from duet.api._errors import APIError, as_api_error
from duet.api.messages._errors import error_body


@pytest.mark.parametrize(("error", "status", "kind"), [
    (APIError(400, "messages.0.content: bad"), 400, "invalid_request_error"),
    (APIError(401, "Missing API key"), 401, "authentication_error"),
    (APIError(404, "The model 'x' does not exist"), 404, "not_found_error"),
    (APIError(413, "too large"), 413, "request_too_large"),
    (UpstreamStatusError("slow down", upstream_status=429), 429, "rate_limit_error"),
    (UpstreamStatusError("boom", upstream_status=500), 502, "api_error"),
    (UpstreamUnreachable("cannot connect"), 503, "overloaded_error"),
    (UpstreamTimeout("silent"), 504, "api_error"),
    (RuntimeError("a bug"), 500, "api_error"),
])
def test_errors_map_to_the_anthropic_types(error: Exception, status: int, kind: str) -> None:
    api_error = as_api_error(error)
    assert api_error.status == status
    assert error_body(api_error) == {"type": "error", "error": {"type": kind, "message": api_error.detail.message}}
