"""JSON on the hot path: every chunk of an upstream stream is decoded, every event sent to a client
encoded, with orjson (about 4x faster to decode and 20x faster to encode than the standard
library, which was the largest single cost of a streamed request after the sockets).

What orjson refuses and the standard library accepts is still accepted, by falling back to the
standard library on that rare path (``NaN``, a lone surrogate escape from an upstream); a string
holding a lone surrogate is encoded as a ``\\ud800`` escape (valid JSON) rather than failing the
response. One difference remains: orjson decodes an integer beyond 64 bits as a float (no model
API sends one).
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """``data`` decoded; raises ``ValueError`` when it is not JSON.

    >>> loads(b'{"a": [1, "\\\\u00e9"]}'), loads(b'[NaN]')
    ({'a': [1, 'é']}, [nan])
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (what ``json.dumps(value, ensure_ascii=False,
    separators=(",", ":")).encode()`` gives, when that can be encoded).

    >>> dumps({"text": "é", "n": 1}), dumps("lone \\ud800")
    (b'{"text":"\\xc3\\xa9","n":1}', b'"lone \\\\ud800"')
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()
