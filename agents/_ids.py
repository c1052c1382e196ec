"""Ids: those of a run's messages (without a system call each), and random ones for what clients see."""

from __future__ import annotations

import itertools
import os
import uuid
from typing import Callable

_HEAD = str(uuid.uuid4())[:24]  # "xxxxxxxx-xxxx-4xxx-yxxx-": a version-4 UUID's head, drawn once per process


new_message_id: Callable[[], str] = map(f"{_HEAD}{{:012x}}".format, itertools.count()).__next__
"""A UUID-shaped id unique in this process (and, by its random head, beyond it), as AutoGen asks
of message ids: counted up from a random head instead of drawn from the OS for each message
(``uuid4`` is a system call and an object; a run makes a dozen of them). The next item of an
endless ``map``: one Python call an id, where a function formatting the count's next is two.

>>> a, b = new_message_id(), new_message_id()
>>> a != b and len(a) == len(str(uuid.uuid4())) and a[:24] == b[:24]
True
"""


def random_id() -> str:
    """32 random hex digits, as ``uuid4().hex`` gives, without the UUID object: the ids clients see
    (request, response and Responses item ids), which must not be guessable from one another: the
    OS's random bytes, as ``secrets.token_hex`` reads them, without its three calls around them."""
    return os.urandom(16).hex()
