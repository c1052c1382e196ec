"""Subscriptions on the lean runtime (``agents/runtime/_subscriptions.py``): Duet's team draws no
subscription id, stock subscriptions keep theirs, direct-message subscriptions match as the stock ones."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from autogen_core import SingleThreadedAgentRuntime, TopicId, TypeSubscription
from duet.agents.runtime import LeanAgentRuntime

from tests.core_parts import run_a_team_on


def test_duets_team_draws_no_subscription_id_and_a_lean_runtime_caches_no_recipients() -> None:
    """A two-agent team registers ten subscriptions when it first runs; Duet's team adds them as their
    lean kind, none with its uuid drawn (drawn when read: stable, a uuid4), each direct-message one
    without a prefix string of its own, and a lean runtime keeps no topic's recipients. A team runs
    the same, a subscription added twice is refused, and one removed by its id no longer delivers."""
    from autogen_core import TypePrefixSubscription


    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert asyncio.run(run_a_team_on(runtime, duet_team=True)) == ["user", "first", "second"]
    assert asyncio.run(run_a_team_on(SingleThreadedAgentRuntime(ignore_unhandled_exceptions=False), duet_team=True)) == [
        "user", "first", "second"]
    manager = runtime._subscription_manager
    subscriptions = list(manager.subscriptions)
    assert sorted(type(subscription).__name__ for subscription in subscriptions) == [
        "LeanTypePrefixSubscription"] * 3 + ["LeanTypeSubscription"] * 7
    assert all(subscription._id is None for subscription in subscriptions)
    assert all(subscription._topic_type_prefix is None for subscription in subscriptions if isinstance(subscription, TypePrefixSubscription))
    assert not hasattr(manager, "_subscribed_recipients") and not manager._seen_topics
    assert manager._seen_topics is LeanAgentRuntime()._subscription_manager._seen_topics  # one empty set for all

    async def add_remove() -> None:
        first = next(subscription for subscription in subscriptions if isinstance(subscription, TypeSubscription))
        with pytest.raises(ValueError, match="already exists"):
            await runtime.add_subscription(TypeSubscription(first.topic_type, first.agent_type))
        assert all(subscription._id is None for subscription in subscriptions)
        assert uuid.UUID(first.id).version == 4 and first.id == first.id
        topic = TopicId(first.topic_type, "key")
        assert first.map_to_agent(topic) in await manager.get_subscribed_recipients(topic)
        await runtime.remove_subscription(first.id)
        assert first.map_to_agent(topic) not in await manager.get_subscribed_recipients(topic)

    asyncio.run(add_remove())


def test_a_lean_runtime_keeps_stock_subscriptions_as_their_lean_kind_with_their_ids() -> None:
    """Any other team (or anyone) adding autogen-core's subscriptions to a lean runtime: they are kept
    as their lean kind (a direct-message one without its prefix string) with the ids they were made
    with, so whoever made one removes it by its id; a subscription of another kind is kept as it is."""
    from autogen_core import DefaultSubscription, TypePrefixSubscription
    from duet.agents.runtime._subscriptions import (
        LeanTypePrefixSubscription,
        LeanTypeSubscription,
    )

    runtime = LeanAgentRuntime(ignore_unhandled_exceptions=False)
    assert asyncio.run(run_a_team_on(runtime)) == ["user", "first", "second"]
    kept = list(runtime._subscription_manager.subscriptions)
    assert sorted(type(subscription).__name__ for subscription in kept) == ["LeanTypePrefixSubscription"] * 3 + ["LeanTypeSubscription"] * 7
    assert all(isinstance(subscription._id, str) for subscription in kept)  # drawn as autogen-core draws them

    async def by_hand() -> None:
        manager = runtime._subscription_manager
        direct, other = TypePrefixSubscription("writer:", "writer"), DefaultSubscription(topic_type="notes", agent_type="writer")
        for subscription in (direct, other):
            await runtime.add_subscription(subscription)
        [lean_direct] = [subscription for subscription in manager.subscriptions if subscription.id == direct.id]
        assert type(lean_direct) is LeanTypePrefixSubscription and lean_direct == direct and lean_direct._topic_type_prefix is None
        assert manager.subscriptions[-1] is other
        with pytest.raises(ValueError, match="already exists"):
            await runtime.add_subscription(TypePrefixSubscription("writer:", "writer"))
        for subscription in (direct, other):
            await runtime.remove_subscription(subscription.id)
        assert not await manager.get_subscribed_recipients(TopicId("writer:", "key"))
        assert not await manager.get_subscribed_recipients(TopicId("notes", "key"))
        one, same = LeanTypeSubscription("t", "a"), LeanTypeSubscription("t", "a")
        assert one == same and one != LeanTypeSubscription("u", "a") and one._id is None and same._id is None  # compared, no id drawn
        assert LeanTypeSubscription("t", "a", "id-1") == LeanTypeSubscription("u", "b", "id-1")  # the same id: equal, as stock
        assert LeanTypeSubscription("t", "a", "id-1") != LeanTypeSubscription("u", "b", "id-2") != one
        prefix = LeanTypePrefixSubscription("writer:", "writer")
        assert prefix == LeanTypePrefixSubscription("writer:", "writer") == TypePrefixSubscription("writer:", "writer")
        assert prefix != LeanTypePrefixSubscription("notes.", "writer") and prefix != one and one != prefix

    asyncio.run(by_hand())


def test_a_direct_message_subscription_keeps_no_prefix_string_and_matches_as_the_stock_one() -> None:
    """Each registered agent type's subscription to its direct messages ("<type>:...") keeps no
    prefix string of its own; it matches, maps and compares as autogen-core's."""
    from autogen_core import TypePrefixSubscription
    from duet.agents.runtime._subscriptions import LeanTypePrefixSubscription

    lean = LeanTypePrefixSubscription("writer:", "writer")
    stock = TypePrefixSubscription("writer:", "writer")
    assert type(lean) is not TypePrefixSubscription and isinstance(lean, TypePrefixSubscription)
    assert lean._topic_type_prefix is None and lean.topic_type_prefix == "writer:" and lean == stock
    for topic in ("writer:", "writer:draft", "writer", "writers:", "write:", "other:writer:"):
        topic_id = TopicId(topic, "key")
        assert lean.is_match(topic_id) == stock.is_match(topic_id), topic
        if stock.is_match(topic_id):
            assert lean.map_to_agent(topic_id) == stock.map_to_agent(topic_id)
    other = LeanTypePrefixSubscription("notes.", "writer")  # any other prefix is kept as given
    assert other.topic_type_prefix == "notes." and other.is_match(TopicId("notes.1", "k")) and other != lean


def test_recipients_found_without_a_coroutine_are_those_autogen_core_finds_in_the_same_order() -> None:
    """``recipients_now`` (the lean runtime's publish) finds, for every topic, the recipients the
    subscriptions' own ``is_match`` and ``map_to_agent`` find, in the order of the subscriptions: both
    of autogen-core's kinds, stock and lean, a direct-message prefix, and another kind."""
    from autogen_core import DefaultSubscription, TypePrefixSubscription
    from duet.agents.runtime._subscriptions import SubscriptionsWithoutCache, lean_subscription

    class Shouting(TypeSubscription):  # another kind: asked, not matched field by field
        def map_to_agent(self, topic_id: TopicId) -> Any:
            from autogen_core import AgentId
            return AgentId(self.agent_type, topic_id.source.upper())

    made = [TypeSubscription("all", "a"), TypePrefixSubscription("b:", "b"), TypePrefixSubscription("al", "c"),
            Shouting("all", "d"), TypeSubscription("one", "e"), TypePrefixSubscription("a:", "a"), DefaultSubscription("all", "f")]

    async def check() -> None:
        for lean in (False, True):
            manager = SubscriptionsWithoutCache()
            for subscription in made:
                await manager.add_subscription(lean_subscription(subscription) if lean else subscription)
            for topic in ("all", "one", "b:x", "b", "al:x", "a:b:c", "ab", "none"):
                expected = [(agent.type, agent.key) for agent in await manager.get_subscribed_recipients(TopicId(topic, "key"))]
                assert manager.recipients_now(TopicId(topic, "key")) == expected, (topic, lean)

    asyncio.run(check())


def test_a_team_registration_shares_equal_lean_subscriptions_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a cache, an equal subscription of autogen-core's kinds is added as the lean one already made
    (any other kind as it is); past the cache's bound, a new one is made for that runtime alone."""
    from autogen_core import DefaultSubscription
    from duet.agents.runtime import TeamRegistration
    from duet.agents.runtime import _subscriptions

    shared: dict[Any, Any] = {}
    runtimes = [LeanAgentRuntime(), LeanAgentRuntime()]

    async def register(runtime: LeanAgentRuntime, *subscriptions: Any) -> list[Any]:
        registration = TeamRegistration(runtime, shared)
        for subscription in subscriptions:
            await registration.add_subscription(subscription)
        return list(runtime._subscription_manager.subscriptions)

    def made() -> list[Any]:
        return [TypeSubscription("t", "a"), TypePrefixSubscription("a:", "a"), DefaultSubscription(agent_type="b")]

    from autogen_core import TypePrefixSubscription

    one, two = (asyncio.run(register(runtime, *made())) for runtime in runtimes)
    assert one[0] is two[0] and one[1] is two[1] and one[2] is not two[2] and len(shared) == 2
    assert [type(s).__name__ for s in one] == ["LeanTypeSubscription", "LeanTypePrefixSubscription", "DefaultSubscription"]
    monkeypatch.setattr(_subscriptions, "SHARED_SUBSCRIPTIONS_MAX", 2)
    third = asyncio.run(register(LeanAgentRuntime(), TypeSubscription("u", "a"), TypeSubscription("t", "a")))
    assert third[1] is one[0] and "u" not in [key[1] for key in shared] and len(shared) == 2


def test_a_team_registration_adds_a_shared_type_subscription_without_making_the_stock_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new team's first run adds seven type subscriptions its factory's earlier teams already made
    lean: each is added as that one, and no stock one is made (each draws a uuid4 id nobody reads)."""
    from duet.agents.runtime import TeamRegistration

    shared: dict[Any, Any] = {}
    first, second = LeanAgentRuntime(), LeanAgentRuntime()
    asyncio.run(TeamRegistration(first, shared).add_type_subscription("group", "writer"))
    drawn: list[int] = []
    stock_uuid4 = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: drawn.append(1) or stock_uuid4())  # this test's spy, undone after it
    asyncio.run(TeamRegistration(second, shared).add_type_subscription("group", "writer"))
    assert drawn == []
    [kept] = second._subscription_manager.subscriptions
    assert kept is first._subscription_manager.subscriptions[0] and kept == TypeSubscription("group", "writer")
