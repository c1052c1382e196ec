"""Stored responses: what ``previous_response_id``, ``item_reference`` items and
``GET /v1/responses/{id}`` read, kept in the service's continuation store (SQLite or Redis,
the same expiry, the same guard: every call bounded by ``store_timeout``).

A record is the ``response`` object and the conversation it ends: the earlier items, this
request's input items and its output items. It is put under the response's id and under the id
of each output item (what an ``item_reference`` names), in its owner's part of the store
(:func:`~duet.agents.continuations.owned`): another API key's id is not found, as an unknown one is not.

A response that could not be stored (the store was down) is remembered here, in this process, by
its keys alone, so that the 404 of its follow-up says so (another replica cannot know it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from duet.agents.continuations import Continuation, ContinuationStore, GuardedStore, StoreUnavailable, owned

from duet.api._errors import APIError

_RESPONSE = "responses:response:"
_ITEM = "responses:item:"
MAX_UNSAVED_REMEMBERED = 10_000
"""Keys of responses not stored during an outage that this process remembers (the oldest go first)."""


def store_unavailable() -> APIError:
    return APIError(503, "the response store is not available; retry shortly, or send the whole conversation as input "
                    "(store: false)", type="server_error", code="store_unavailable", headers={"Retry-After": "1"})


class ResponseStore:
    """Responses by owner and id, over a (guarded) :class:`~duet.agents.continuations.ContinuationStore`."""

    def __init__(self, store: ContinuationStore) -> None:
        self._store = store
        self._unsaved: OrderedDict[str, None] = OrderedDict()

    async def _get(self, key: str) -> dict[str, Any] | None:
        try:
            if isinstance(self._store, GuardedStore):  # a follow-up's read: it waits (bounded) across a failover
                found = await self._store.get([key], across_failover=True)
            else:
                found = await self._store.get([key])
        except StoreUnavailable:
            raise store_unavailable() from None
        return found.record if found is not None else None

    async def response(self, owner: str, response_id: str) -> dict[str, Any] | None:
        """The record of ``owner``'s ``response_id`` (``{"response": {...}, "items": [...]}``), or None. 503 when the store is out."""
        return await self._get(owned(owner, _RESPONSE + response_id))

    async def record_with_item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        """The record of ``owner``'s response that output ``item_id``, or None. 503 when the store is out."""
        return await self._get(owned(owner, _ITEM + item_id))

    async def put(self, owner: str, response: dict[str, Any], items: list[dict[str, Any]]) -> bool:
        """Keeps a finished response; False when the store could not (an outage, reported once by the guard)."""
        keys = [owned(owner, _RESPONSE + response["id"])] + [owned(owner, _ITEM + item["id"]) for item in response["output"]]
        try:
            await self._store.put(keys, Continuation(record={"response": response, "items": items}))
        except StoreUnavailable:
            self._remember_unsaved(keys)
            return False
        return True

    async def ensure_available(self) -> None:
        """503 while the store is known to be down (the guard tries it again once its retry interval
        has passed: a store that is back is found back here too)."""
        if self._store.available:
            return
        try:
            await self._store.ping()
        except StoreUnavailable:
            raise store_unavailable() from None

    def _remember_unsaved(self, keys: list[str]) -> None:
        for key in keys:
            self._unsaved[key] = None
        while len(self._unsaved) > MAX_UNSAVED_REMEMBERED:
            self._unsaved.popitem(last=False)

    def response_unsaved(self, owner: str, response_id: str) -> bool:
        """Whether this process answered ``owner``'s ``response_id`` and could not store it."""
        return owned(owner, _RESPONSE + response_id) in self._unsaved

    def item_unsaved(self, owner: str, item_id: str) -> bool:
        """Whether this process answered ``owner``'s response that output ``item_id`` and could not store it."""
        return owned(owner, _ITEM + item_id) in self._unsaved
