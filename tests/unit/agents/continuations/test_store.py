"""The continuation stores (``agents/continuations/_store.py`` and its back-ends): entries expire, any call
id of a round finds the round."""

from __future__ import annotations

import asyncio

import pytest
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage


def test_continuation_stores_expire(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Entries live for their TTL, in every store; any of a round's call ids finds the round."""
    import time as clock

    from autogen_core import FunctionCall
    from duet.agents.continuations import (
        Continuation,
        MemoryContinuationStore,
        SQLiteContinuationStore,
        open_store,
    )

    turn = [AssistantMessage(content=[FunctionCall(id="c1", name="f", arguments="{}")], source="a"),
            FunctionExecutionResultMessage(content=[])]
    continuation = Continuation(turn=turn, reasoning="why")

    async def main() -> None:
        for store in (SQLiteContinuationStore(tmp_path / "s.db", ttl=0.3), MemoryContinuationStore(ttl=0.3)):
            await store.put(["c1", "c2"], continuation)
            assert (await store.get(["zz", "c2"])) == continuation
            clock.sleep(0.4)  # noqa: ASYNC251 - the subject: the entries' time (TTL 0.3 s) runs out; nothing else runs meanwhile
            assert await store.get(["c1"]) is None
            await store.close()

    asyncio.run(main())
    assert type(open_store(f"sqlite:///{tmp_path}/x.db").store).__name__ == "SQLiteContinuationStore"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unsupported state URL"):
        open_store("postgres://x")
