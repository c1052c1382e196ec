"""Subscriptions as the lean runtime keeps them: autogen-core's two subscription classes without the
strings nobody reads (a uuid id drawn when first read, the direct-message prefix derived from the agent
type), the view of a runtime through which Duet's team adds its own (:class:`TeamRegistration`), and a
subscription manager without a cache of recipients (autogen-core 0.7.5, pinned). A team adds ten
subscriptions to its runtime when it first runs, and a pipeline keeps a team, with its runtime, for
every request in flight and every idle team in its pool."""

from __future__ import annotations

import uuid
from typing import Any

from autogen_core import AgentId, AgentRuntime, Subscription, TopicId, TypePrefixSubscription, TypeSubscription
from autogen_core._runtime_impl_helpers import SubscriptionManager


def _known_id(subscription: object) -> str | None:
    """A subscription's id, or None for one whose id is not drawn yet (:class:`_IdOnRead`)."""
    return subscription._id if isinstance(subscription, _IdOnRead) else subscription.id  # type: ignore[attr-defined]


def _same_id(one: object, other: object) -> bool:
    # An id not drawn yet equals no other: when it is drawn it is a fresh uuid4.
    mine, theirs = _known_id(one), _known_id(other)
    return mine is not None and mine == theirs


class _IdOnRead:
    """For autogen-core's subscription classes, which draw a uuid4 string for their id when made: made
    without an id, one is drawn when first read. Nothing reads the id of a team's subscription unless
    it is removed or compared with one of a stock class; equality compares the types first (as the
    stock ``__eq__`` does either way), so adding one to a runtime draws no id."""

    _id: str | None

    @property
    def id(self) -> str:
        if self._id is None:
            self._id = str(uuid.uuid4())
        return self._id


class LeanTypeSubscription(_IdOnRead, TypeSubscription):  # type: ignore[misc]  # its _id may be None
    """autogen-core's ``TypeSubscription`` whose id, when none is given, is drawn when first read."""

    def __init__(self, topic_type: str, agent_type: str | Any, id: str | None = None) -> None:
        super().__init__(topic_type, agent_type, id or "-")  # any id given: the stock __init__ draws none
        self._id = id

    def __eq__(self, other: object) -> bool:
        if type(other) is LeanTypeSubscription:  # the same test, on the fields: a runtime compares each it adds with those it holds
            return (self._agent_type == other._agent_type and self._topic_type == other._topic_type) \
                or (self._id is not None and self._id == other._id)
        if not isinstance(other, TypeSubscription):
            return False
        return (self.agent_type == other.agent_type and self.topic_type == other.topic_type) or _same_id(self, other)

    __hash__ = None  # type: ignore[assignment]  # as the stock class: equal by value, not hashable


class LeanTypePrefixSubscription(_IdOnRead, TypePrefixSubscription):  # type: ignore[misc]  # its _id may be None
    """autogen-core's ``TypePrefixSubscription`` whose id, when none is given, is drawn when first
    read, and which keeps no string for the prefix every registered agent type gets for its direct
    messages, ``"<type>:"`` (~100 bytes a type): that prefix is kept as None and read as the type and
    ":". Any other prefix is kept as given."""

    def __init__(self, topic_type_prefix: str, agent_type: str | Any, id: str | None = None) -> None:
        super().__init__(topic_type_prefix, agent_type, id or "-")
        self._id = id
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

    def __eq__(self, other: object) -> bool:
        if type(other) is LeanTypePrefixSubscription and self._agent_type == other._agent_type \
                and self._topic_type_prefix == other._topic_type_prefix:  # equal fields: equal (as below, without the calls)
            return True
        if not isinstance(other, TypePrefixSubscription):
            return False
        return (self.agent_type == other.agent_type and self.topic_type_prefix == other.topic_type_prefix) \
            or _same_id(self, other)

    __hash__ = None  # type: ignore[assignment]


def lean_subscription(subscription: Subscription, *, keep_id: bool = True) -> Subscription:
    """``subscription`` as the lean runtime keeps it: one of autogen-core's two classes (exactly
    those) as its lean kind, with the same id (whoever made it may remove it by that id) or, when
    nobody can know that id (``keep_id=False``), none until it is read; any other as it is."""
    kind = type(subscription)
    if kind is TypeSubscription:
        return LeanTypeSubscription(subscription.topic_type, subscription.agent_type,  # type: ignore[attr-defined]
                                    subscription.id if keep_id else None)
    if kind is TypePrefixSubscription:
        return LeanTypePrefixSubscription(subscription.topic_type_prefix, subscription.agent_type,  # type: ignore[attr-defined]
                                          subscription.id if keep_id else None)
    return subscription


SHARED_SUBSCRIPTIONS_MAX = 256
"""Lean subscriptions one :class:`TeamRegistration` cache keeps (a team of Duet's adds ten, the same ten
for every team of a pipeline); past it, a subscription is made for its runtime alone."""


def _shared_key(subscription: Subscription) -> tuple[Any, str, str] | None:
    """What tells one of autogen-core's two subscription kinds apart from another of its kind (what
    its ``__eq__`` compares); None for any other kind (not shared)."""
    kind = type(subscription)
    if kind is TypeSubscription:
        return kind, subscription.topic_type, subscription.agent_type  # type: ignore[attr-defined]
    if kind is TypePrefixSubscription:
        return kind, subscription.topic_type_prefix, subscription.agent_type  # type: ignore[attr-defined]
    return None


class TeamRegistration:
    """A runtime as an AgentChat team registers its agents on it (``BaseGroupChat._init``; AgentChat
    0.7.5, pinned): the subscriptions AgentChat makes there, and keeps nowhere, are added as their lean
    kind without an id (drawn if ever read: a uuid string less for each of a team's ten); the rest is
    the runtime's own.

    ``shared``: lean subscriptions already made, by what they match (:func:`_shared_key`), for teams
    whose topic and agent types are the same (a pipeline's teams: each on a runtime of its own). An
    equal one is added to this runtime instead of a new one (~1 KB a team): autogen-core never changes
    a subscription it holds, and its id, drawn only if read, is the same on every runtime, where only
    that runtime's list is searched by it."""

    def __init__(self, runtime: AgentRuntime, shared: dict[tuple[Any, str, str], Subscription] | None = None) -> None:
        self._runtime = runtime
        self._shared = shared

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def add_type_subscription(self, topic_type: str, agent_type: str) -> None:
        """``add_subscription(TypeSubscription(topic_type, agent_type))``, without making the stock one
        (it draws a uuid4 id that nobody reads) when an equal lean one is shared."""
        lean = self._shared.get((TypeSubscription, topic_type, agent_type)) if self._shared is not None else None
        if lean is None:
            await self.add_subscription(TypeSubscription(topic_type=topic_type, agent_type=agent_type))
        else:
            await self._runtime.add_subscription(lean)

    async def add_subscription(self, subscription: Subscription) -> None:
        shared = self._shared
        key = _shared_key(subscription) if shared is not None else None
        if shared is None or key is None:
            await self._runtime.add_subscription(lean_subscription(subscription, keep_id=False))
            return
        lean = shared.get(key)
        if lean is None:
            lean = lean_subscription(subscription, keep_id=False)
            if len(shared) < SHARED_SUBSCRIPTIONS_MAX:
                shared[key] = lean
        await self._runtime.add_subscription(lean)


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

    async def add_subscription(self, subscription: Subscription) -> None:
        # Mirrors SubscriptionManager.add_subscription of autogen-core 0.7.5 (pinned): refused when an equal one
        # is held; compared by the list (each held one's __eq__, as the stock generator asks), nothing rebuilt.
        if subscription in self._subscriptions:
            raise ValueError("Subscription already exists")
        self._subscriptions.append(subscription)

    async def get_subscribed_recipients(self, topic: TopicId) -> list[AgentId]:
        return [subscription.map_to_agent(topic) for subscription in self._subscriptions if subscription.is_match(topic)]

    def recipients_now(self, topic: TopicId) -> list[tuple[str, str]]:
        """The agent type and key of each recipient of ``topic``, in the order of the subscriptions (as
        :meth:`get_subscribed_recipients` finds them), without a coroutine and without an ``AgentId``
        (each checks its type against a pattern): autogen-core's two kinds are matched here, field by
        field, as their ``is_match`` and ``map_to_agent`` do (0.7.5, pinned); any other kind is asked."""
        topic_type, key = topic.type, topic.source
        found: list[tuple[str, str]] = []
        for subscription in self._subscriptions:
            kind = type(subscription)
            if kind is LeanTypeSubscription or kind is TypeSubscription:
                if subscription._topic_type == topic_type:  # type: ignore[attr-defined]
                    found.append((subscription._agent_type, key))  # type: ignore[attr-defined]
            elif kind is LeanTypePrefixSubscription or kind is TypePrefixSubscription:
                # a direct-message prefix ("<type>:", kept as None) matches no topic without a colon: a team's
                prefix = subscription._topic_type_prefix  # type: ignore[attr-defined]
                if (":" in topic_type or prefix is not None) and _prefix_matches(subscription, topic_type):
                    found.append((subscription._agent_type, key))  # type: ignore[attr-defined]
            elif subscription.is_match(topic):
                agent_id = subscription.map_to_agent(topic)
                found.append((agent_id.type, agent_id.key))
        return found


def _prefix_matches(subscription: Any, topic_type: str) -> bool:
    """``is_match`` of a (lean) ``TypePrefixSubscription``."""
    prefix = subscription._topic_type_prefix
    if prefix is not None:
        return topic_type.startswith(prefix)
    agent_type: str = subscription._agent_type
    return topic_type.startswith(agent_type) and topic_type[len(agent_type):len(agent_type) + 1] == ":"
