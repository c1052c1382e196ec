"""What a client does not see of a tool round (and a stored Responses API response), kept until its
follow-up arrives: one record type, one abstract store, a module per back-end.

When the answer model calls client tools, Duet returns only those calls. The rest of the round —
service tools it ran (calls and results), earlier service-only rounds of the same turn, and the
reasoning the round was answered with — would be lost: the client's follow-up brings back only what
it saw. Duet stores that hidden part, keyed by each returned tool-call id, and splices it back into
the conversation when a follow-up carries those ids (:func:`splice`, :func:`tool_rounds`).

Back-ends: SQLite (a file, the default; :class:`SQLiteContinuationStore`), Redis (``redis://``,
``rediss://``, ``unix://``, or the primary Redis Sentinel names, ``redis+sentinel://``; shared by
replicas; :class:`RedisContinuationStore`), memory
(:class:`MemoryContinuationStore`). Entries expire. The store is an optimisation of answer quality,
never a reason to fail a request: :func:`open_store` (and ``Duet``, for a store passed in from
Python) wraps a back-end in a :class:`GuardedStore`, which bounds every call by a timeout and turns
faults into :class:`StoreUnavailable` (reported once per outage), so a round goes on without its
hidden part; a Redis Sentinel store that fails over is waited for (bounded), its writes held meanwhile.

Every entry belongs to an owner (:func:`owned`): the API key whose request stored it, as a stable,
non-reversible id, so one key never reads or continues what another stored; a run from Python has
:data:`DEFAULT_OWNER`.

Public API: the record, :class:`Continuation`, and the abstract :class:`ContinuationStore`; the
back-ends above and :class:`GuardedStore`; :func:`open_store` (a URL → a guarded back-end; :func:`check_state_url` checks one without opening it; the
defaults :data:`DEFAULT_STATE_URL`, :data:`DEFAULT_STORE_TIMEOUT`, :data:`DEFAULT_FAILOVER_WAIT` and :data:`DEFAULT_TTL`);
:func:`owned`; :func:`redacted_url` (a store URL as logs show it); :func:`tool_rounds`, :func:`splice`; the reasoning
already paid for, :class:`ReasoningLedger` (a retry of the same request reuses it for
:data:`DEFAULT_REUSE_SECONDS`; its keys: :func:`fingerprint`, :func:`prefix_digests`); the errors
:class:`StoreOpenError` (the store cannot open: the service does not start) and :class:`StoreUnavailable`.
"""

from duet.agents.continuations._guarded import GuardedStore, check_state_url, open_store
from duet.agents.continuations._ledger import DEFAULT_REUSE_SECONDS, ReasoningLedger, fingerprint, prefix_digests
from duet.agents.continuations._memory import MemoryContinuationStore
from duet.agents.continuations._redis import RedisContinuationStore, redacted_url
from duet.agents.continuations._rounds import splice, tool_rounds
from duet.agents.continuations._sqlite import SQLiteContinuationStore
from duet.agents.continuations._store import (
    DEFAULT_FAILOVER_WAIT,
    DEFAULT_OWNER,
    DEFAULT_STATE_URL,
    DEFAULT_STORE_TIMEOUT,
    DEFAULT_TTL,
    Continuation,
    ContinuationStore,
    StoreOpenError,
    StoreUnavailable,
    owned,
)

__all__ = [
    "Continuation",
    "ContinuationStore",
    "DEFAULT_FAILOVER_WAIT",
    "DEFAULT_OWNER",
    "DEFAULT_REUSE_SECONDS",
    "DEFAULT_STATE_URL",
    "DEFAULT_STORE_TIMEOUT",
    "DEFAULT_TTL",
    "GuardedStore",
    "MemoryContinuationStore",
    "ReasoningLedger",
    "RedisContinuationStore",
    "SQLiteContinuationStore",
    "StoreOpenError",
    "StoreUnavailable",
    "check_state_url",
    "fingerprint",
    "open_store",
    "owned",
    "prefix_digests",
    "redacted_url",
    "splice",
    "tool_rounds",
]
