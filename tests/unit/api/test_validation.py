"""Request bodies (``api/_validation.py``): too deep is refused, on the event loop and in a thread, and a
body parses to exactly what the standard library reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from duet.api._errors import APIError
from duet.api._validation import MAX_JSON_DEPTH, load_body
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("size", ["small", "large"])  # parsed on the event loop, and in a thread after a scan
def test_a_body_nested_one_level_too_deep_is_refused(size: str) -> None:
    padding = "x" * (70 * 1024 if size == "large" else 0)

    def body(depth: int) -> bytes:  # brackets in a string do not count
        return ('{"pad": "' + padding + '", "a": ' + "[" * (depth - 1) + '"[[]]"' + "]" * (depth - 1) + "}").encode()

    assert load_body(body(MAX_JSON_DEPTH))["pad"] == padding
    with pytest.raises(APIError, match="deeper than 128 levels"):
        load_body(body(MAX_JSON_DEPTH + 1))


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _json_values, max_size=6), st.booleans())
def test_a_body_parses_to_exactly_what_the_standard_library_reads(body: dict[str, Any], ascii_only: bool) -> None:
    """Integers of any size (orjson holds 64 bits), floats, any text (as UTF-8 or as escapes, surrogate
    pairs included): the same values of the same types."""
    raw = json.dumps(body, ensure_ascii=ascii_only).encode()
    expected = json.loads(raw)
    parsed = load_body(raw)
    assert parsed == expected
    assert _types(parsed) == _types(expected)


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value)
