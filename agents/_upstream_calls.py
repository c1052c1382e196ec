"""The tool calls an upstream issued, sent back to it exactly as it made them.

Clients get Duet's own call ids (``call_<24 hex>``): upstreams repeat, omit or reuse theirs
(Kimi's ``functions.name:0`` restarts in every conversation), and clients and the continuation store
key on them. An upstream, though, must get back the ids it issued — Mistral refuses any id that is
not 9 letters and digits — and the provider fields it put on each call (Gemini 3's
``extra_content.google.thought_signature``, without which its follow-up is refused). So:

- the model client returns a call that carries provider fields as an :class:`UpstreamCall`;
- the answer agent gives each call a Duet id and keeps what the upstream issued under it
  (:func:`issue`, an :class:`IssuedCall` in the run's ``issued_calls``); the continuation store keeps
  the entries of a client round with its hidden part, so a follow-up on another worker or replica has them;
- every model call translates its history back (:func:`to_upstream`): Duet's ids become the
  upstream's, with its fields. A call whose entry is unknown (a round before the latest user turn,
  or one expired from the store) keeps Duet's id — except for an upstream that accepts only
  Mistral's ids (:func:`wants_short_ids`), which gets one derived from Duet's (:func:`short_id`), the
  same for the call and its result.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, MutableMapping, Sequence

from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage, LLMMessage
from pydantic import BaseModel, Field

from duet.agents._conversation import new_call_id


@dataclass
class UpstreamCall(FunctionCall):
    """A tool call with the provider fields its upstream put beside ``id``, ``type`` and ``function``
    (e.g. ``extra_content``), to be written back on the assistant message as they came."""

    extra: dict[str, Any] = field(default_factory=dict)


class IssuedCall(BaseModel):
    """What an upstream issued for one tool call: its id, and its provider fields."""

    id: str
    extra: dict[str, Any] = Field(default_factory=dict)


IssuedCalls = MutableMapping[str, IssuedCall]
"""Duet's call id → what the upstream issued for that call."""


def issue(calls: Sequence[FunctionCall], issued: IssuedCalls) -> list[FunctionCall]:
    """The calls with Duet's ids; what the upstream issued for each is kept in ``issued`` (not an
    empty id, nor one the same answer repeats: such an id cannot be sent back to mean one call).

    >>> issued = {}
    >>> [call] = issue([UpstreamCall(id="a1B2c3D4e", name="f", arguments="{}", extra={"x": 1})], issued)
    >>> call.id.startswith("call_"), issued[call.id]
    (True, IssuedCall(id='a1B2c3D4e', extra={'x': 1}))
    """
    seen = [call.id for call in calls]
    out: list[FunctionCall] = []
    for call in calls:
        duet_id = new_call_id()
        extra = call.extra if isinstance(call, UpstreamCall) else {}
        if call.id and seen.count(call.id) == 1:
            issued[duet_id] = IssuedCall(id=call.id, extra=extra)
        out.append(FunctionCall(id=duet_id, name=call.name, arguments=call.arguments))
    return out


MISTRAL_MODELS = re.compile(r"mistral|magistral|devstral|codestral|ministral|pixtral", re.IGNORECASE)
"""Model names served with Mistral's tokenizer or API, which refuse a call id that is not 9 letters and digits."""
_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def wants_short_ids(client: Any) -> bool:
    """Whether ``client``'s upstream takes only Mistral's call ids: it issued one (``issues_short_ids``,
    learned by :func:`remember_ids`), or its model's name says Mistral."""
    return bool(getattr(client, "issues_short_ids", False)) or bool(MISTRAL_MODELS.search(str(getattr(client, "model", ""))))


def remember_ids(client: Any, calls: Sequence[FunctionCall]) -> None:
    """What the upstream's call ids showed, for the client's next calls (a Duet client only)."""
    if hasattr(client, "issues_short_ids") and any(_MISTRAL_ID.fullmatch(call.id or "") for call in calls):
        client.issues_short_ids = True


def short_id(duet_id: str) -> str:
    """A Mistral-shaped id (9 letters and digits) for ``duet_id``, the same every time.

    >>> short_id("call_0123456789abcdef01234567") == short_id("call_0123456789abcdef01234567"), len(short_id("x"))
    (True, 9)
    """
    number = int.from_bytes(hashlib.sha256(duet_id.encode()).digest()[:8], "big")
    return "".join(_ALPHABET[(number // 62**i) % 62] for i in range(9))


def to_upstream(history: Sequence[LLMMessage], issued: Mapping[str, IssuedCall], short_ids: bool = False) -> list[LLMMessage]:
    """``history`` as the upstream must get it: each call it issued under its own id, with its
    provider fields, and each result under that id; with ``short_ids``, every other call (and its
    result) under :func:`short_id` of its id. Messages without such calls are passed as they are."""
    if short_ids:
        issued = _with_short_ids(history, issued)
    if not issued:
        return list(history)
    out: list[LLMMessage] = []
    for message in history:
        if isinstance(message, AssistantMessage) and isinstance(message.content, list):
            if any(call.id in issued for call in message.content):
                message = message.model_copy(update={"content": [_as_issued(call, issued) for call in message.content]})
        elif isinstance(message, FunctionExecutionResultMessage) and any(result.call_id in issued for result in message.content):
            results = [
                result.model_copy(update={"call_id": issued[result.call_id].id}) if result.call_id in issued else result
                for result in message.content
            ]
            message = message.model_copy(update={"content": results})
        out.append(message)
    return out


def _with_short_ids(history: Sequence[LLMMessage], issued: Mapping[str, IssuedCall]) -> dict[str, IssuedCall]:
    """``issued`` and a derived Mistral-shaped id for every other call of ``history`` whose id is not one."""
    derived = {
        call.id: IssuedCall(id=short_id(call.id))
        for message in history
        if isinstance(message, AssistantMessage) and isinstance(message.content, list)
        for call in message.content
        if call.id not in issued and not _MISTRAL_ID.fullmatch(call.id)
    }
    return {**issued, **derived} if derived else dict(issued)


def _as_issued(call: FunctionCall, issued: Mapping[str, IssuedCall]) -> FunctionCall:
    entry = issued.get(call.id)
    if entry is None:
        return call
    if entry.extra:
        return UpstreamCall(id=entry.id, name=call.name, arguments=call.arguments, extra=entry.extra)
    return FunctionCall(id=entry.id, name=call.name, arguments=call.arguments)


def issued_in(turn: Sequence[LLMMessage], issued: Mapping[str, IssuedCall]) -> dict[str, IssuedCall]:
    """The entries of ``issued`` for the calls of ``turn`` (what a stored round must keep)."""
    return {
        call.id: issued[call.id]
        for message in turn
        if isinstance(message, AssistantMessage) and isinstance(message.content, list)
        for call in message.content
        if call.id in issued
    }
