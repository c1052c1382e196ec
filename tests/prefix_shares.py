"""How much of a model request the next one begins with, byte for byte (issue 26): what a provider's
prompt cache (OpenAI, DeepSeek, Anthropic, vLLM's prefix cache) can serve. Shared by
tests/http/test_prefix_cache.py and bench/prefix_reuse.py."""

from __future__ import annotations

import itertools
import json
from typing import Any


def messages_bytes(body: dict[str, Any]) -> bytes:
    """A request's messages as compact JSON: the bytes a prompt cache compares."""
    return json.dumps(body["messages"], ensure_ascii=False, separators=(",", ":")).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share.

    >>> common_prefix(b"abcd", b"abxy")
    2
    """
    size = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        size += 1
    return size


def prefix_share(previous: bytes, current: bytes) -> float:
    """The share of ``previous`` that ``current`` starts with (the closing bracket of a list aside).

    >>> prefix_share(b'[1,2]', b'[1,2,3]')
    1.0
    """
    return min(1.0, (common_prefix(previous, current) + 1) / len(previous))


def shares(requests: list[bytes]) -> list[float]:
    """Of each request, the share the next one starts with, rounded to 4 places."""
    return [round(prefix_share(a, b), 4) for a, b in itertools.pairwise(requests)]
