"""Subscriptions as the lean runtime keeps them: the one every registered agent type gets for its
direct messages without a prefix string of its own, and a subscription manager without a cache of
recipients (autogen-core 0.7.5, pinned). A team adds its subscriptions to its runtime when it first
runs, and a pipeline keeps a team, with its runtime, for every request in flight and every idle team
in its pool."""

from __future__ import annotations

from typing import Any

from autogen_core import AgentId, Subscription, TopicId, TypePrefixSubscription
from autogen_core._runtime_impl_helpers import SubscriptionManager


class LeanTypePrefixSubscription(TypePrefixSubscription):
    """autogen-core's ``TypePrefixSubscription`` without a string for the prefix every registered
    agent type gets for its direct messages, ``"<type>:"`` (~100 bytes a type): that prefix is kept as
    None and read as the type and ":". Any other prefix is kept as given."""

    def __init__(self, topic_type_prefix: str, agent_type: str | Any, id: str | None = None) -> None:
        super().__init__(topic_type_prefix, agent_type, id)
        if topic_type_prefix == f"{self._agent_type}:":
            self._topic_type_prefix = None  # type: ignore[assignment]

    @property
    def topic_type_prefix(self) -> str:
        prefix = self._topic_type_prefix
        return f"{self._agent_type}:" if prefix is None else prefix

    def is_match(self, topic_id: TopicId) -> bool:
        prefix = self._topic_type_prefix
        if prefix is not None:
            return topic_id.type.startswith(prefix)
        agent_type = self._agent_type
        return topic_id.type.startswith(agent_type) and topic_id.type[len(agent_type):len(agent_type) + 1] == ":"


def lean_subscription(subscription: Subscription) -> Subscription:
    """``subscription`` as the lean runtime keeps it: autogen-core's ``TypePrefixSubscription``
    (exactly that class) as :class:`LeanTypePrefixSubscription` with the same id (whoever made it
    may remove it by that id), any other as it is."""
    if type(subscription) is TypePrefixSubscription:
        return LeanTypePrefixSubscription(subscription.topic_type_prefix, subscription.agent_type, subscription.id)
    return subscription


_NO_TOPICS: frozenset[TopicId] = frozenset()  # one for all: each frozenset() call makes a new one (~200 bytes)


class SubscriptionsWithoutCache(SubscriptionManager):
    """autogen-core's ``SubscriptionManager`` (0.7.5, pinned) without its cache of recipients: the
    stock manager keeps, for every topic a message was published to, the list of its recipients'
    ``AgentId`` objects (and the topic), and rebuilds all of it whenever a subscription is added. A
    team's runtime holds a handful of subscriptions; finding a topic's recipients among them when a
    message is published costs less than keeping them for every team a pipeline keeps."""

    def __init__(self) -> None:  # SubscriptionManager.__init__ would make the cache
        self._subscriptions = []
        self._seen_topics = _NO_TOPICS  # type: ignore[assignment]  # read only by the stock cache

    def _rebuild_subscriptions(self, topics: Any) -> None:
        """Nothing is cached."""

    async def get_subscribed_recipients(self, topic: TopicId) -> list[AgentId]:
        return [subscription.map_to_agent(topic) for subscription in self._subscriptions if subscription.is_match(topic)]
