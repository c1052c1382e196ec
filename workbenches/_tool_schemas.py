"""Reading OpenAI tool lists.

A client sends the same tools with every request (often dozens, each with a JSON schema); what Duet
makes of them is made once per distinct content and reused (:class:`ContentCache`).
"""

from __future__ import annotations

import marshal
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

import orjson
from autogen_core.tools import ToolSchema

from duet.workbenches._proxy_tool import ProxyTool

MAX_CACHED_TOOLS = 1024
"""Client tools kept built between requests (a client sends the same tools with every request)."""
MAX_CACHED_TOOL_CHARS = 8 * 1024 * 1024
"""Bound on the size of the tools kept (bytes of their content key); a tool larger than a 64th of it is never kept."""
MAX_CACHED_TOOL_LISTS = 256
"""Whole tool lists kept (a list seen before gives its tools without looking at each one)."""

_V = TypeVar("_V")
_NO_REFERENCES = 2  # the marshal format: see content_key
_MARSHALLED = b"\x00"  # before a content key marshal wrote (no JSON text starts with it)


def content_key(value: Any) -> bytes | None:
    """Bytes that stand for ``value``'s content (JSON-like data: dicts, lists, strings, numbers), for
    caches by content; ``None`` for a value holding anything else (it is then not cached). Equal
    contents give equal bytes, and equal bytes can only come from equal contents (they read back
    into it: :func:`content_of`).

    orjson's JSON, the fastest (a request's 128 tool schemas: ~0.06 ms, ``marshal`` ~0.27 ms), keeps
    apart ``1``, ``1.0`` and ``True``; a tuple is an array (it reads back as a list). What it would
    merge or cannot write (``NaN`` and ``None`` are both ``null``; a subclass of ``str`` or ``dict``;
    an integer beyond 64 bits; keys that are not strings) is written by ``marshal`` instead, behind a
    byte no JSON starts with, in format 2, which has no back-references (later formats refer back to
    an object met twice, or interned, so the bytes would depend on how the data shares its objects).

    >>> content_key({"a": [1, "x"]}) == content_key({"a": [1, "x"]}), content_key({"a": 1}) == content_key({"a": True})
    (True, False)
    >>> content_key({"a": None}) == content_key({"a": float("nan")}), content_of(content_key({"a": None}))
    (False, {'a': None})
    >>> content_key({"a": object()}) is None
    True
    """
    try:
        key = orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS)
    except orjson.JSONEncodeError:
        pass
    else:
        if b"null" not in key:
            return key
    try:
        return _MARSHALLED + marshal.dumps(value, _NO_REFERENCES)
    except ValueError:  # an object marshal does not write (a caller's own class), or nested past its limit
        return None


def content_of(key: bytes) -> Any:
    """The content a :func:`content_key` stands for (a new copy)."""
    if key[:1] == _MARSHALLED:
        return marshal.loads(key[1:])
    return orjson.loads(key)


class ContentCache(Generic[_V]):
    """What was made from a value, by the value's :func:`content_key`: least recently used first
    out, bounded in entries and in the bytes of their keys. Shared by the requests (and the threads)
    of one process; a value must therefore hold no request's state, and nobody may change it."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._entries: OrderedDict[bytes, _V] = OrderedDict()
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()  # apps in threads of one process share a cache

    def get(self, key: bytes) -> _V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: bytes, value: _V) -> None:
        """Keeps ``value`` under ``key``, unless the key alone would take more than a 64th of the bound."""
        if len(key) * 64 > self._max_bytes:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = value
            self._bytes += len(key)
            while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
                old, _ = self._entries.popitem(last=False)
                self._bytes -= len(old)

    def get_or_make(self, value: Any, make: Callable[[Any], _V], key: bytes | None = None) -> _V:
        """What ``make`` makes of ``value``: made once per content, from a private copy of it (read
        back from its key) that no caller can change after; every time for a value without a key.
        ``key``: the value's :func:`content_key`, when the caller has it already."""
        key = key or content_key(value)
        if key is None:
            return make(value)
        made = self.get(key)
        if made is None:
            made = make(content_of(key))
            self.put(key, made)
        return made

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


def client_tools_by_name(tools: Iterable[ProxyTool]) -> dict[str, ProxyTool]:
    """Each client tool by the names a model calls it: its alias, and the client's own name (models
    sometimes use it instead of the alias); an alias wins over another tool's own name."""
    tools = tools if isinstance(tools, (list, tuple)) else list(tools)
    by_name = {tool.name: tool for tool in tools}
    for tool in tools:
        by_name.setdefault(tool.client_name, tool)
    return by_name


@dataclass(frozen=True, slots=True, eq=False)
class ClientToolIndex:
    """What a request's workbench needs of a client tool list, made once per list (cached with it): the
    tools, their schemas, each by name (:func:`client_tools_by_name`). Shared by requests: nobody changes it."""

    tools: tuple[ProxyTool, ...]
    schemas: tuple[ToolSchema, ...]
    by_name: dict[str, ProxyTool]


class ClientTools(list[ProxyTool]):
    """The list :func:`proxy_tools_from_openai` returns, carrying the :class:`ClientToolIndex` of its
    content, so that a request's workbench does no work per tool (:meth:`DuetWorkbench.for_request`,
    which uses the index only while the list still holds its tools)."""

    __slots__ = ("shared_index",)

    def __init__(self, index: ClientToolIndex) -> None:
        super().__init__(index.tools)
        self.shared_index = index


_tools: ContentCache[ProxyTool] = ContentCache(MAX_CACHED_TOOLS, MAX_CACHED_TOOL_CHARS)
_tool_lists: ContentCache[ClientToolIndex] = ContentCache(MAX_CACHED_TOOL_LISTS, MAX_CACHED_TOOL_CHARS)


def _proxy_tool_list(tools: list[Mapping[str, Any]]) -> ClientToolIndex:
    proxies = tuple(_tools.get_or_make(tool, ProxyTool.from_openai) for tool in tools)
    seen: set[str] = set()
    for proxy in proxies:
        if proxy.name in seen:
            raise ValueError(f"two tools are named '{proxy.client_name}'")
        seen.add(proxy.name)
    return ClientToolIndex(proxies, tuple(proxy.schema for proxy in proxies), client_tools_by_name(proxies))


def proxy_tools_from_openai(tools: Iterable[Mapping[str, Any]], key: bytes | None = None) -> list[ProxyTool]:
    """One :class:`ProxyTool` per OpenAI ``tools`` (or legacy ``functions``) entry. A proxy tool holds
    no state of a request, so requests share them: a list seen before gives the same tools at the cost
    of one :func:`content_key`, and an entry seen before (in another list) gives the same tool; what is
    derived from a tool's schema (the model client's encoding, the reasoning prompt's line) is
    therefore derived once, not per request.

    ``key``: the list's :func:`content_key`, when the caller has it already (the validation of
    a request's tools keys them: :class:`duet.api.chat._protocol.KnownTools`).

    Raises ``ValueError`` when two entries share a name, which no model could tell apart.
    """
    entries = tools if type(tools) is list else list(tools)
    return ClientTools(_tool_lists.get_or_make(entries, _proxy_tool_list, key))
