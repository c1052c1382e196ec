"""The request's workbench (``workbenches/_workbench.py``): client tools shadow service tools of the same
name; a request's client tools as read from the wire make it from their list's index, with no work per tool."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from autogen_core import CancellationToken
from duet.workbenches import (
    DuetWorkbench,
    ProxyTool,
    PythonFunctionTool,
    RequestContext,
)


def test_workbench_shadows_service_tools_with_client_tools() -> None:
    from autogen_core.tools import FunctionTool

    def lookup(query: str) -> str:
        return query

    service = FunctionTool(lookup, description="service lookup")
    other = FunctionTool(lookup, description="another service tool", name="other")
    client = ProxyTool("lookup", "client lookup", {"type": "object"})
    workbench = DuetWorkbench.for_request([service, other], [client])
    assert [t.name for t in workbench.tools] == ["lookup", "other"] and workbench.client_tool("lookup") is client
    assert workbench.service_tools == [other] and workbench.client_tool("other") is None
    workbench = DuetWorkbench.for_request([service, other], [])
    assert workbench.service_tools == [service, other] and [t.name for t in workbench.tools] == ["lookup", "other"]
    workbench = DuetWorkbench.for_request([service], [client])
    schemas = asyncio.run(workbench.list_tools())
    assert schemas == [{"name": "lookup", "description": "client lookup", "parameters": {"type": "object"}}]


def test_a_request_workbench_of_client_tools_is_made_from_their_list_index() -> None:
    """Client tools from :func:`proxy_tools_from_openai` carry their list's index (made once per list):
    the workbench made from it is the one the tools would make one by one, its name map shared by the
    requests of that list; a list changed since, or service tools beside them, take the general way."""
    from duet.workbenches import proxy_tools_from_openai

    wire = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in ("kb.search", "notify")]
    tools, again = proxy_tools_from_openai(wire), proxy_tools_from_openai(wire)
    request = RequestContext(request_id="r1")
    indexed, by_hand = DuetWorkbench.for_request([], tools, request=request), DuetWorkbench(list(tools), request=request)
    assert vars(indexed).keys() == vars(by_hand).keys() and {**vars(indexed), "_schemas": None} == vars(by_hand)
    assert asyncio.run(indexed.list_tools()) == asyncio.run(by_hand.list_tools()) == [tool.schema for tool in tools]
    assert indexed.client_tool("kb.search") is indexed.client_tool(tools[0].name) is tools[0] and indexed.request is request
    assert DuetWorkbench.for_request([], again)._client_tools is indexed._client_tools  # one map for the list, not one per request
    changed = proxy_tools_from_openai(wire)
    changed[1] = ProxyTool("other", parameters={"type": "object"})
    workbench = DuetWorkbench.for_request([], changed)
    assert workbench.client_tool("other") is changed[1] and workbench.client_tool("notify") is None
    assert [tool.name for tool in workbench.tools] == [tools[0].name, "other"]


def who_asks(city: str, _context: RequestContext) -> dict[str, Any]:
    """Reports the request it runs for."""
    return {"city": city, "request_id": _context.request_id, "user": _context.user, "pipeline": _context.pipeline,
            "thread": threading.current_thread().name}


async def who_asks_async(_context: RequestContext) -> str:
    return _context.request_id


def _text(result: Any) -> str:
    return "".join(part.content for part in result.result)


def test_the_request_workbench_hands_its_request_to_service_tools() -> None:
    request = RequestContext(request_id="req-1", user="ada", pipeline="duet")
    tools = [PythonFunctionTool(who_asks), PythonFunctionTool(who_asks_async)]
    workbench = DuetWorkbench.for_request(tools, [ProxyTool("client_tool", parameters={"type": "object"})], request=request)

    async def main() -> list[Any]:
        streamed = [item async for item in workbench.call_tool_stream("who_asks", {"city": "Paris"}, call_id="c1")]
        called = await workbench.call_tool("who_asks_async", {})
        outside = await DuetWorkbench(tools).call_tool("who_asks_async", {})  # not a request's workbench
        direct = await tools[0].run_json({"city": "Rome"}, CancellationToken())  # the tool called by itself
        bad = await workbench.call_tool("who_asks", {"town": "Paris"})  # arguments the tool does not take
        return [streamed, called, outside, direct, bad]

    streamed, called, outside, direct, bad = asyncio.run(main())
    assert len(streamed) == 1 and not streamed[0].is_error
    assert '"request_id": "req-1", "user": "ada", "pipeline": "duet"' in _text(streamed[0])
    assert '"thread": "duet-tool' in _text(streamed[0])  # sync code still runs off the event loop
    assert _text(called) == "req-1" and _text(outside) == "" and direct["request_id"] == "" and direct["user"] is None
    assert bad.is_error and "city" in _text(bad)
    assert workbench.request is request
