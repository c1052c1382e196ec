"""Bearer-key authentication (``DUET_API_KEYS``)."""

from __future__ import annotations

import hmac
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
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        given = token.strip().encode()
        return scheme.lower() == "bearer" and any(hmac.compare_digest(given, key) for key in self._keys)

    async def __call__(self, request: Request) -> None:
        if not self.accepts(request):
            header = request.headers.get("authorization", "")
            raise APIError(
                401,
                "Incorrect API key provided." if header else "Missing API key: send 'Authorization: Bearer <key>'.",
                type="invalid_request_error",
                code="invalid_api_key",
            )
