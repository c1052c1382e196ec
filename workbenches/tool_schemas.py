"""Reading OpenAI tool lists."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from .proxy_tool import ProxyTool

MAX_CACHED_TOOLS = 1024
"""Client tools kept built between requests (a client sends the same tools with every request)."""
MAX_CACHED_TOOL_CHARS = 8 * 1024 * 1024
"""Bound on the size of the tools kept (characters of their JSON); a tool larger than a 64th of it is never kept."""


_KEY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # json.dumps would make one per call


class _ProxyToolCache:
    """Built :class:`ProxyTool` objects by the content of the client's entry (its JSON encoding),
    least recently used first out, bounded in count and in size. A proxy tool holds no state of a
    request, so requests with the same tool share one (built from a private copy of the entry,
    which no caller can change), and what is derived from its schema (the model client's encoding,
    the reasoning prompt's line) is derived once, not per request."""

    def __init__(self, max_tools: int = MAX_CACHED_TOOLS, max_chars: int = MAX_CACHED_TOOL_CHARS) -> None:
        self._tools: OrderedDict[str, ProxyTool] = OrderedDict()
        self._max_tools = max_tools
        self._max_chars = max_chars
        self._chars = 0
        self._lock = threading.Lock()  # apps in threads of one process share the cache

    def get(self, tool: Mapping[str, Any]) -> ProxyTool:
        try:
            key = _KEY_ENCODER.encode(tool)
        except (TypeError, ValueError):  # not JSON (a Python caller's own objects): built, not kept
            return ProxyTool.from_openai(tool)
        with self._lock:
            proxy = self._tools.get(key)
            if proxy is not None:
                self._tools.move_to_end(key)
                return proxy
        proxy = ProxyTool.from_openai(json.loads(key))
        if len(key) * 64 > self._max_chars:
            return proxy
        with self._lock:
            if key not in self._tools:
                self._tools[key] = proxy
                self._chars += len(key)
                while len(self._tools) > self._max_tools or self._chars > self._max_chars:
                    old, _ = self._tools.popitem(last=False)
                    self._chars -= len(old)
        return proxy

    def clear(self) -> None:
        with self._lock:
            self._tools.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._tools)


_cache = _ProxyToolCache()


def proxy_tools_from_openai(tools: Iterable[Mapping[str, Any]]) -> list[ProxyTool]:
    """One :class:`ProxyTool` per OpenAI ``tools`` (or legacy ``functions``) entry; an entry seen in
    an earlier request gives the same tool (:class:`_ProxyToolCache`).

    Raises ``ValueError`` when two entries share a name, which no model could tell apart.
    """
    proxies = [_cache.get(tool) for tool in tools]
    seen: set[str] = set()
    for proxy in proxies:
        if proxy.name in seen:
            raise ValueError(f"two tools are named '{proxy.client_name}'")
        seen.add(proxy.name)
    return proxies
