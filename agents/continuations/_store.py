"""What a client does not see of a tool round, kept until its follow-up request arrives: the stored
record (:class:`Continuation`), who owns it (:func:`owned`), and what every back-end does
(:class:`ContinuationStore`). The back-ends are modules of their own; :func:`open_store` picks one
by URL and guards it."""

from __future__ import annotations

import abc
import logging
from typing import Any, Iterable, Sequence

from autogen_core.models import LLMMessage
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator

from duet._errors import DuetError
from duet.agents._model_reasoning import ModelReasoning, ReasonedAssistantMessage, calls_key, with_reasoning
from duet.agents._upstream_calls import IssuedCall

logger = logging.getLogger("duet.agents.continuations")

DEFAULT_TTL = 24 * 3600.0
DEFAULT_STATE_URL = "sqlite:///.duet/state.db"
DEFAULT_STORE_TIMEOUT = 2.0  # seconds per store call (the service takes it from ServiceOptions.store_timeout)
DEFAULT_FAILOVER_WAIT = 10.0
"""Seconds a store that fails over (Redis Sentinel) is waited for: a Sentinel's ``down-after-milliseconds``
(5 s in deploy/kubernetes' production overlay) plus its election, with room to spare."""

DEFAULT_OWNER = ""
"""The owner of state stored without a key of its own: an open endpoint, keys that share state
(``state_scope: shared``), a run started from Python."""


def owned(owner: str, key: str) -> str:
    """``key`` in ``owner``'s part of the store. Another owner's entry under the same key is not
    found, as an unknown key is not: same code path, same answer. The default owner's keys are as
    Duet wrote them before state was scoped to keys."""
    return f"{owner}/{key}" if owner else key


class Continuation(BaseModel):
    """The hidden part of one round. ``turn`` holds the messages the answer agent added in its turn,
    ending with the assistant message that made *all* the round's calls and the results of the
    service calls among them. ``reasoning`` is the reasoner's; the answer model's own reasoning on
    each of the turn's tool-calling messages is kept on them (:class:`ReasonedAssistantMessage`) and,
    so that it survives serialisation, in ``model_reasoning`` under the message's first call id."""

    turn: list[LLMMessage] = Field(default_factory=list)
    reasoning: str = ""
    record: dict[str, Any] | None = None
    """Kept by ``duet.api.responses`` instead of a round: a stored Responses API response and the
    conversation items it continues (``previous_response_id``), in the same store and expiry."""
    model_reasoning: dict[str, ModelReasoning] = Field(default_factory=dict)
    grounding: str = Field("", description="The retrieved context the round was answered with (grounding).")
    reuse_until: float = Field(0.0, description="Kept by the reasoning ledger: until when (wall-clock seconds) a retry "
                               "reuses this reasoning (duet.agents.continuations._ledger).")
    issued: dict[str, IssuedCall] = Field(
        default_factory=dict, description="What the answer model's upstream issued for the round's calls, by Duet's call id.")

    @model_validator(mode="after")
    def _reasoning_on_the_turn(self) -> "Continuation":
        """Each tool-calling message and its reasoning in both places: a stored turn is read back as
        plain assistant messages, a fresh one carries its reasoning only on them."""
        for index, message in enumerate(self.turn):
            key = calls_key(message)
            if key is None:
                continue
            if isinstance(message, ReasonedAssistantMessage):
                self.model_reasoning.setdefault(key, message.reasoning)
            elif key in self.model_reasoning:
                self.turn[index] = with_reasoning(message, self.model_reasoning[key])  # type: ignore[arg-type]
        return self


_CONTINUATION = TypeAdapter(Continuation)


class StoreOpenError(DuetError, RuntimeError):
    """The store cannot be opened (e.g. an unwritable SQLite path): the service does not start."""


class StoreUnavailable(DuetError, RuntimeError):
    """A store call failed or did not answer in time. The :class:`GuardedStore` has reported it
    (once per outage); the caller goes on without the stored part."""


def decode(payload: str | bytes | None, call_ids: Sequence[str]) -> Continuation | None:
    if not payload:
        return None
    try:
        return _CONTINUATION.validate_json(payload)
    except ValidationError:  # e.g. written by an older Duet: that round goes on without it
        logger.warning("unreadable saved state for tool calls %s: ignored", ", ".join(call_ids))
        return None


class ContinuationStore(abc.ABC):
    """Where hidden parts wait for their follow-up."""

    @abc.abstractmethod
    async def put(self, call_ids: Sequence[str], continuation: Continuation) -> None: ...

    @abc.abstractmethod
    async def get(self, call_ids: Iterable[str]) -> Continuation | None: ...

    async def get_each(self, keys: Sequence[str]) -> list[Continuation | None]:
        """What is kept under each of ``keys`` (``None`` where nothing is), in order. Back-ends that can
        answer in one call (Redis ``MGET``, one SQL query) override this loop."""
        return [await self.get([key]) for key in keys]

    async def put_each(self, writes: Sequence[tuple[Sequence[str], Continuation]]) -> None:
        """Each continuation under its keys, as :meth:`put` would. Back-ends that can write them all in one
        call (one SQL transaction, one Redis pipeline) override this loop."""
        for call_ids, continuation in writes:
            await self.put(call_ids, continuation)

    async def ping(self) -> None:
        """Raises when the store cannot be reached (readiness checks call it)."""
        return

    @property
    def available(self) -> bool:
        """False while the store is known to be out (a :class:`GuardedStore` knows; others are taken to be up)."""
        return True

    @property
    def held_writes(self) -> int:
        """Writes held in this worker while the store fails over (only a :class:`GuardedStore` holds any)."""
        return 0

    def fails_over(self, error: BaseException) -> bool:
        """True when ``error`` is what a call meets while the back-end fails over to another server (no
        primary, the old one refusing or demoted): a :class:`GuardedStore` then waits for the new one."""
        return False

    async def close(self) -> None:
        return None

    def __str__(self) -> str:
        return type(self).__name__
