"""Reading OpenAI tool lists."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .proxy_tool import ProxyTool


def proxy_tools_from_openai(tools: Iterable[Mapping[str, Any]]) -> list[ProxyTool]:
    """One :class:`ProxyTool` per OpenAI ``tools`` (or legacy ``functions``) entry.

    Raises ``ValueError`` when two entries share a name, which no model could tell apart.
    """
    proxies = [ProxyTool.from_openai(tool) for tool in tools]
    seen: set[str] = set()
    for proxy in proxies:
        if proxy.name in seen:
            raise ValueError(f"two tools are named '{proxy.client_name}'")
        seen.add(proxy.name)
    return proxies
