"""Key authentication (``DUET_API_KEYS``): ``Authorization: Bearer <key>``, or ``x-api-key: <key>``
as the Anthropic SDK sends it; the same keys either way."""

from __future__ import annotations

import hmac
import ipaddress
from typing import Sequence

from fastapi import Request

from .errors import APIError


class BearerAuth:
    """A FastAPI dependency (async: sync dependencies cost a thread hop); with no keys the endpoint is open."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = [key.encode() for key in keys if key]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def accepts(self, request: Request) -> bool:
        """Whether the request carries a valid key (always, when the endpoint is open)."""
        if not self._keys:
            return True
        headers = request.headers
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer":
                return False
        else:
            token = headers.get("x-api-key", "")
        given = token.strip().encode()
        return any(hmac.compare_digest(given, key) for key in self._keys)

    def may_see_details(self, request: Request) -> bool:
        """Whether the service's insides (readiness checks, counters) may be shown: with keys
        configured, to a valid key; on an open endpoint, to clients on this machine only."""
        if self._keys:
            return self.accepts(request)
        return request.client is not None and is_loopback(request.client.host)

    async def __call__(self, request: Request) -> None:
        if not self.accepts(request):
            given = "authorization" in request.headers or "x-api-key" in request.headers
            raise APIError(
                401,
                "Incorrect API key provided." if given else "Missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>').",
                type="invalid_request_error",
                code="invalid_api_key",
            )


def is_loopback(host: str) -> bool:
    """127.0.0.0/8 or ::1 (also as an IPv4-mapped address)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback
