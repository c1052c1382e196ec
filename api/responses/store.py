"""Stored responses: what ``previous_response_id``, ``item_reference`` items and
``GET /v1/responses/{id}`` read, kept in the service's continuation store (SQLite or Redis,
the same expiry, the same guard: every call bounded by ``store_timeout``).

A record is the ``response`` object and the conversation it ends: the earlier items, this
request's input items and its output items. It is put under the response's id and under the id
of each output item (what an ``item_reference`` names).
"""

from __future__ import annotations

from typing import Any

from duet.agents.continuations import Continuation, ContinuationStore, StoreUnavailable

from ..errors import APIError

_RESPONSE = "responses:response:"
_ITEM = "responses:item:"


def _unavailable() -> APIError:
    return APIError(503, "the response store is not available; retry shortly, or send the whole conversation as input "
                    "(store: false)", type="server_error", code="store_unavailable", headers={"Retry-After": "1"})


class ResponseStore:
    """Responses by id, over a (guarded) :class:`~duet.agents.continuations.ContinuationStore`."""

    def __init__(self, store: ContinuationStore) -> None:
        self._store = store

    async def _get(self, key: str) -> dict[str, Any] | None:
        try:
            found = await self._store.get([key])
        except StoreUnavailable:
            raise _unavailable() from None
        return found.record if found is not None else None

    async def response(self, response_id: str) -> dict[str, Any] | None:
        """The record of ``response_id`` (``{"response": {...}, "items": [...]}``), or None. 503 when the store is out."""
        return await self._get(_RESPONSE + response_id)

    async def record_with_item(self, item_id: str) -> dict[str, Any] | None:
        """The record of the response that output ``item_id``, or None. 503 when the store is out."""
        return await self._get(_ITEM + item_id)

    async def put(self, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        """Keeps a finished response; an outage (reported once by the guard) loses it, not the request."""
        keys = [_RESPONSE + response["id"]] + [_ITEM + item["id"] for item in response["output"]]
        try:
            await self._store.put(keys, Continuation(record={"response": response, "items": items}))
        except StoreUnavailable:
            pass
