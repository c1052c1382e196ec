"""The request body as JSON Duet can safely hold: UTF-8, finite numbers, bounded nesting and size,
no lone surrogates. Each check costs a few microseconds for ordinary bodies: the closer looks run
only when a cheap test on the raw bytes says they may find something.

Why each one: Python's ``json`` accepts ``NaN``/``Infinity`` (and ``1e999`` becomes ``inf``), which
are not JSON and would be forwarded as such; it decodes ``"\\ud800"`` into a string no UTF-8
encoder can write; and it nests as deep as the stack allows, so a body that parses can still
crash the first ``json.dumps`` or ``deepcopy`` further down.
"""

from __future__ import annotations

import codecs
import json
import math
import re
import time
from typing import Any

import orjson

from duet.api._errors import APIError

MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects anywhere in a body. Real tool schemas stay far below it,
and it keeps every later recursive walk (serialising for the upstream, copying) far from
Python's recursion limit."""

MAX_JSON_VALUES = 500_000
"""Most arrays, objects and list items a large body may hold. A body at the size limit made of
tiny values (``[[],[],…]``) would otherwise hold the interpreter for over a second while it
parses; real requests (4,096 messages, 128 tools) stay far below it."""

LARGE_BODY_BYTES = 64 * 1024
"""Bodies larger than this are checked before they are parsed, with a scan that lets other threads
run every few thousand tokens: ``duet.api._serving`` reads them in a worker thread, so the event loop
goes on serving other clients meanwhile (but for the one C call that parses, which cannot be
split). Smaller ones are parsed on the event loop (a few milliseconds at most)."""

_PIECE = 1024 * 1024
"""Large bodies are decoded and searched a piece at a time, letting other threads run between pieces."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_DIGITS = b"0" * 19  # a run of digits this long may be an integer orjson cannot hold (beyond 64 bits)
# A string, whole, or one structural byte. A string also ends at the end of the body, so a quote
# that opens no string is read once, not once per quote after it (which would be quadratic).
_JSON_TOKENS = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)|[\[\]{},]', re.DOTALL)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _too_deep() -> APIError:
    return APIError(400, f"the body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels", code="invalid_json")


def _check_depth(raw: bytes, body: Any) -> None:
    """For a body already parsed: deeper than :data:`MAX_JSON_DEPTH`? Skipped when the bracket
    count alone says no; otherwise the arrays and objects are gathered a level at a time (one
    comprehension per level: ~2x faster than a walk with a stack, which a request with 128 tool
    schemas, ~1,000 objects, needs)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return
    level = [body]
    for _ in range(MAX_JSON_DEPTH):
        level = [item for value in level for item in (value.values() if type(value) is dict else value)
                 if type(item) is dict or type(item) is list]
        if not level:
            return
    raise _too_deep()


def _scan_large(raw: bytes) -> None:
    """For a large body, before it is parsed: more than :data:`MAX_JSON_VALUES` values, or an
    unterminated string? Stops at the first; lets other threads run every few thousand tokens.
    (Depth is checked once parsed, for every body, by :func:`_check_depth`.)"""
    values = 0
    for count, match in enumerate(_JSON_TOKENS.finditer(raw), 1):
        token = raw[match.start()]
        if token == 0x5B or token == 0x7B or token == 0x2C:  # [ { ,
            values += 1
        elif token == 0x5D or token == 0x7D:  # ] }: nothing to count
            pass
        elif raw[match.end() - 1] != 0x22 or match.end() - match.start() < 2:  # a string that never ends
            raise APIError(400, f"the body is not valid JSON: unterminated string at byte {match.start()}", code="invalid_json")
        if values > MAX_JSON_VALUES:
            raise APIError(400, f"the body holds more than {MAX_JSON_VALUES} JSON values", code="invalid_json")
        if not count % 4096:
            time.sleep(0)  # hand the interpreter to other threads (the event loop) now, not after a 5 ms switch interval


def _format_path(path: list[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{_printable_key(part)}" if text else _printable_key(part)
    return text


def _has_lone_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _lone_surrogate_path(body: Any) -> str | None:
    """Where the first string (value or key) holding a lone UTF-16 surrogate is, if any."""
    stack: list[tuple[Any, list[str | int]]] = [(body, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if _has_lone_surrogate(value):
                return _format_path(path) or "body"
        elif isinstance(value, dict):
            if any(_has_lone_surrogate(key) for key in value):  # a key: the object holding it is the param
                return _format_path(path) or "body"
            stack.extend((item, path + [key]) for key, item in reversed(value.items()))  # popped in body order
        elif isinstance(value, list):
            stack.extend((value[index], path + [index]) for index in reversed(range(len(value))))
    return None


def _printable_key(key: str) -> str:
    return key if len(key) <= 64 else key[:61] + "..."


def _decode(raw: bytes) -> str:
    """Strict UTF-8 (UTF-8-encoded surrogates are invalid too), a piece at a time for large bodies."""
    if len(raw) <= _PIECE:
        return raw.decode("utf-8")
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = []
    for start in range(0, len(raw), _PIECE):
        try:
            parts.append(decoder.decode(raw[start : start + _PIECE], final=start + _PIECE >= len(raw)))
        except UnicodeDecodeError as exc:
            raise UnicodeDecodeError(exc.encoding, exc.object, exc.start + start, exc.end + start, exc.reason) from None
        time.sleep(0)
    return "".join(parts)


def _may_hold_lone_surrogates(raw: bytes) -> bool:
    """Whether ``raw`` has a ``\\ud800``-``\\udfff`` escape (valid pairs have them too)."""
    if len(raw) <= _PIECE:
        return _SURROGATE_ESCAPE.search(raw) is not None
    for start in range(0, len(raw), _PIECE):
        if _SURROGATE_ESCAPE.search(raw, start, start + _PIECE + 5) is not None:  # +5: an escape across the cut
            return True
        time.sleep(0)
    return False


def _parsed_strictly(raw: bytes) -> Any:
    """``raw`` parsed by orjson (~10x faster than ``json``), which refuses by itself what this module
    refuses (invalid UTF-8, ``NaN``, out-of-range numbers, lone surrogate escapes); ``None`` when it
    refuses, or when the body holds an integer orjson would turn into a float (19 digits or more)."""
    if _NINETEEN_DIGITS in raw.translate(_DIGITS_AS_ZEROS):  # ~1 ns a byte (a regex takes ~20)
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def load_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or an :class:`APIError` (400) saying what is wrong with it."""
    if len(raw) > LARGE_BODY_BYTES:
        _scan_large(raw)
    body = _parsed_strictly(raw)
    if body is not None:
        if not isinstance(body, dict):
            raise APIError(400, "the body must be a JSON object", code="invalid_json")
        _check_depth(raw, body)
        return body
    # Refused (or not for orjson to say): the standard library parses it again, to say what is wrong.
    try:
        text = _decode(raw)
    except UnicodeDecodeError as exc:
        raise APIError(400, f"the body is not valid UTF-8 (byte {exc.start})", code="invalid_json") from None
    try:
        body = json.loads(text, parse_float=_finite_float, parse_constant=_no_constants)
    except RecursionError:  # json's own guard, for a body nested past the interpreter's stack
        raise _too_deep() from None
    except ValueError as exc:
        raise APIError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, "the body must be a JSON object", code="invalid_json")
    _check_depth(raw, body)
    if _may_hold_lone_surrogates(raw):
        where = _lone_surrogate_path(body)
        if where is not None:
            raise APIError(400, f"{where}: the text holds a lone UTF-16 surrogate, which is not valid Unicode",
                           param=where, code="invalid_unicode")
    return body
