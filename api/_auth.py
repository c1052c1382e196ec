"""Key authentication (``DUET_API_KEYS``): ``Authorization: Bearer <key>``, or ``x-api-key: <key>``
as the Anthropic SDK sends it; the same keys either way. A key is also whose stored state a request
reads and writes (:func:`owner_id`)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Sequence

from fastapi import Request

from duet.agents.continuations import DEFAULT_OWNER

from duet.api._errors import APIError

_OWNER_DOMAIN = b"duet/state-owner/v1\0"  # this hash is used for nothing else


def owner_id(key: str) -> str:
    """The owner of the state a key's requests store: a SHA-256 of the key, the same in every replica
    and every restart (no secret of its own to share), from which the key cannot be recovered. A plain
    hash, as services keep their API tokens: keys are long and random (a short key could be guessed
    from it by whoever reads the store)."""
    return "key-" + hashlib.sha256(_OWNER_DOMAIN + key.encode()).hexdigest()[:32]


class BearerAuth:
    """A FastAPI dependency (async: sync dependencies cost a thread hop); with no keys the endpoint is open."""

    def __init__(self, keys: Sequence[str], *, shared_state: bool = False) -> None:
        """``shared_state``: every key's requests share one owner's stored state (``state_scope: shared``)."""
        given = [key for key in keys if key]
        self._keys = [key.encode() for key in given]
        self._owners = [DEFAULT_OWNER if shared_state else owner_id(key) for key in given]  # computed once, not per request

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def accepts(self, request: Request) -> bool:
        """Whether the request carries a valid key (always, when the endpoint is open)."""
        return self.owner_of(request) is not None

    def owner_of(self, request: Request) -> str | None:
        """The owner of the stored state the request may read and write: its key's (:func:`owner_id`),
        the one default owner on an open endpoint or with shared state; None without a valid key."""
        if not self._keys:
            return DEFAULT_OWNER
        headers = request.headers
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer":
                return None
        else:
            token = headers.get("x-api-key", "")
        given = token.strip().encode()
        owner = None
        for key, key_owner in zip(self._keys, self._owners, strict=True):  # every key compared: the time does not tell which matched
            if hmac.compare_digest(given, key):
                owner = key_owner
        return owner

    def may_see_details(self, request: Request) -> bool:
        """Whether the service's insides (readiness checks, counters) may be shown: with keys
        configured, to a valid key; on an open endpoint, to clients on this machine only."""
        if self._keys:
            return self.accepts(request)
        return request.client is not None and is_loopback(request.client.host)

    async def __call__(self, request: Request) -> str:
        """The request's owner (:meth:`owner_of`); 401 without a valid key."""
        owner = self.owner_of(request)
        if owner is None:
            given = "authorization" in request.headers or "x-api-key" in request.headers
            raise APIError(
                401,
                "Incorrect API key provided." if given else "Missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>').",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        return owner


def is_loopback(host: str) -> bool:
    """127.0.0.0/8 or ::1 (also as an IPv4-mapped address)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback
