"""The team pool (``agents/pipeline/_pool.py``): reuse, bounds, drain."""

from __future__ import annotations

from duet.agents.pipeline._pool import TeamPool, TeamSlot

from tests.core_parts import replayed_team


def test_team_pool_reuses_bounds_and_drains() -> None:
    made: list[TeamSlot] = []

    def factory() -> TeamSlot:
        made.append(TeamSlot(replayed_team()))
        return made[-1]

    pool = TeamPool(factory, max_idle=2)
    first, second, third = pool.acquire(), pool.acquire(), pool.acquire()
    assert made == [first, second, third]  # an empty pool makes a new team for each lease
    assert pool.release(first) and pool.release(second) and not pool.release(third)  # full: the caller closes it
    assert pool.acquire() is second and pool.acquire() is first and len(made) == 3  # reused, newest first
    pool.release(first)
    assert pool.drain() == [first] and pool.drain() == []
    assert pool.acquire() is not first and len(made) == 4
