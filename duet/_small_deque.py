"""A deque for queues that hold an item or two: a list with the deque methods they use."""

from __future__ import annotations

import collections
from typing import Any


class SmallDeque(list):
    """``append``, ``pop``, indexing and ``len`` of a list, with ``appendleft`` and ``popleft``
    (linear in the length, which is a few items here). A ``collections.deque`` allocates a
    512-byte block when it is made (~750 bytes in all); an empty list is 56 bytes.

    >>> queue = SmallDeque([2])
    >>> queue.appendleft(1); queue.append(3)
    >>> queue.popleft(), queue.pop(), list(queue)
    (1, 3, [2])
    """

    __slots__ = ()

    def appendleft(self, item: Any) -> None:
        self.insert(0, item)

    def popleft(self) -> Any:
        return self.pop(0)


def lighten_deque(owner: object, attribute: str, *, only_empty: bool = False) -> None:
    """Replaces ``owner``'s ``attribute``, if it is a ``collections.deque`` (and, with ``only_empty``,
    an empty one), by a :class:`SmallDeque` with the same items: for queues of a library's objects
    made once per request or connection."""
    queue = getattr(owner, attribute, None)
    if type(queue) is collections.deque and not (only_empty and queue):
        setattr(owner, attribute, SmallDeque(queue))
