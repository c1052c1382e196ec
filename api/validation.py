"""The request body as JSON Duet can safely hold: UTF-8, finite numbers, bounded nesting and size,
no lone surrogates. Each check costs nothing for ordinary bodies; the closer looks run only when
a cheap test on the raw bytes says they may find something.

Why each one: Python's ``json`` accepts ``NaN``/``Infinity`` (and ``1e999`` becomes ``inf``), which
are not JSON and would be forwarded as such; it decodes ``"\\ud800"`` into a string no UTF-8
encoder can write; and it nests as deep as the stack allows, so a body that parses can still
crash the first ``json.dumps`` or ``deepcopy`` further down.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .errors import APIError

MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects anywhere in a body. Real tool schemas stay far below it,
and it keeps every later recursive walk (serialising for the upstream, copying) far from
Python's recursion limit."""

MAX_JSON_VALUES = 500_000
"""Most arrays, objects and list items a body may hold. A body at the size limit made of tiny
values (``[[],[],…]``) would otherwise hold the interpreter for seconds while it parses; real
requests (4,096 messages, 128 tools) stay far below it."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# Strings (skipped whole) or one structural byte: what the shape scan below counts.
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _check_shape(raw: bytes) -> None:
    """Rejects bodies nested deeper than :data:`MAX_JSON_DEPTH` or holding more than
    :data:`MAX_JSON_VALUES` values, before they are parsed. Skipped when the bracket count alone
    proves the body is shallow; otherwise a scan that stops as soon as a limit is passed."""
    opening = raw.count(b"[") + raw.count(b"{")
    if opening <= MAX_JSON_DEPTH:
        return
    depth = values = 0
    for match in _JSON_TOKEN.finditer(raw):
        token = match.group()[0]
        if token == 0x5B or token == 0x7B:  # [ {
            depth += 1
            values += 1
            if depth > MAX_JSON_DEPTH:
                raise APIError(400, f"the body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels", code="invalid_json")
        elif token == 0x5D or token == 0x7D:  # ] }
            depth -= 1
        elif token == 0x2C:  # ,
            values += 1
        if values > MAX_JSON_VALUES:
            raise APIError(400, f"the body holds more than {MAX_JSON_VALUES} JSON values", code="invalid_json")


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


def load_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or an :class:`APIError` (400) saying what is wrong with it."""
    _check_shape(raw)
    try:
        text = raw.decode("utf-8")  # strict: UTF-8-encoded surrogates are invalid UTF-8 too
    except UnicodeDecodeError as exc:
        raise APIError(400, f"the body is not valid UTF-8 (byte {exc.start})", code="invalid_json") from None
    try:
        body = json.loads(text, parse_float=_finite_float, parse_constant=_no_constants)
    except RecursionError:  # unreachable after _check_shape; kept so no body can become a 500
        raise APIError(400, "the body nests arrays and objects too deeply", code="invalid_json") from None
    except ValueError as exc:
        raise APIError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, "the body must be a JSON object", code="invalid_json")
    if _SURROGATE_ESCAPE.search(raw) is not None:  # only then can a lone surrogate be in there
        where = _lone_surrogate_path(body)
        if where is not None:
            raise APIError(400, f"{where}: the text holds a lone UTF-16 surrogate, which is not valid Unicode",
                           param=where, code="invalid_unicode")
    return body
