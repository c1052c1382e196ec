"""Client tool schemas (``workbenches/_tool_schemas.py``): equal entries give one tool and one encoding,
the cache is bounded and keyed by content, the request body carries the tools as before."""

from __future__ import annotations

import json

import pytest
from duet.agents import OpenAICompatibleClient
from duet.agents._reasoning_agent import describe_tools
from duet.agents.upstream._transform import tool_to_openai, tools_json
from duet.workbenches import (
    CachingToolSchema,
    ProxyTool,
    derived_from,
    proxy_tools_from_openai,
)
from duet.workbenches import _tool_schemas as tool_schemas
from duet.workbenches._tool_schemas import ContentCache

from tests.core_parts import tool_entry


def test_equal_tool_entries_give_one_tool_and_one_encoding() -> None:
    first = proxy_tools_from_openai([tool_entry(), tool_entry("other")])
    again = proxy_tools_from_openai([tool_entry(), tool_entry("other")])  # equal content, new objects (a new request)
    assert [a is b for a, b in zip(first, again, strict=True)] == [True, True]
    assert tools_json([t.schema for t in first]) is not None
    encoded = derived_from(first[0].schema, "openai_json", lambda s: "derived again")
    assert encoded == json.dumps(tool_to_openai(first[0].schema), ensure_ascii=False)  # derived once, by tools_json


def test_different_tool_entries_give_different_tools_and_encodings() -> None:
    one, = proxy_tools_from_openai([tool_entry(minimum=1)])
    two, = proxy_tools_from_openai([tool_entry(minimum=2)])
    assert one is not two
    assert tools_json([one.schema]) != tools_json([two.schema])
    assert json.loads(tools_json([two.schema]))[0]["function"]["parameters"]["properties"]["top"]["minimum"] == 2


def test_a_cached_tool_is_not_changed_by_its_callers_dict() -> None:
    entry = tool_entry("mutable_tool")
    tool, = proxy_tools_from_openai([entry])
    entry["function"]["parameters"]["properties"]["top"]["minimum"] = 99  # the caller reuses its dict
    assert tool.schema["parameters"]["properties"]["top"]["minimum"] == 1
    changed, = proxy_tools_from_openai([entry])
    assert changed is not tool and changed.schema["parameters"]["properties"]["top"]["minimum"] == 99


def test_a_tool_list_seen_before_gives_its_tools_and_a_changed_list_keeps_its_unchanged_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    first = proxy_tools_from_openai([tool_entry("list_a"), tool_entry("list_b")])
    with monkeypatch.context() as patch:  # a list seen before is not read tool by tool
        patch.setattr(tool_schemas._tools, "get_or_make", lambda *_: pytest.fail("looked at one tool"))
        again = proxy_tools_from_openai(json.loads(json.dumps([tool_entry("list_a"), tool_entry("list_b")])))  # the next request's body
    assert [a is b for a, b in zip(first, again, strict=True)] == [True, True]
    changed = proxy_tools_from_openai([tool_entry("list_a"), tool_entry("list_b", minimum=5)])
    assert changed[0] is first[0] and changed[1] is not first[1]
    assert changed[1].schema["parameters"]["properties"]["top"]["minimum"] == 5
    assert proxy_tools_from_openai([tool_entry("list_b"), tool_entry("list_a")]) == [first[1], first[0]]  # another order, another list


def test_a_tool_list_naming_two_tools_alike_is_refused_every_time() -> None:
    twins = [tool_entry("twin"), tool_entry("twin", minimum=2)]
    for _ in range(2):
        with pytest.raises(ValueError, match="two tools are named 'twin'"):
            proxy_tools_from_openai(twins)


def test_a_tool_holding_other_objects_is_built_each_time() -> None:
    entry = tool_entry("odd")
    entry["function"]["parameters"]["x-marker"] = object()  # a Python caller's own object: no content key
    one, = proxy_tools_from_openai([entry])
    two, = proxy_tools_from_openai([entry])
    assert one is not two and one.schema["parameters"]["x-marker"] is entry["function"]["parameters"]["x-marker"]


def test_the_tool_cache_is_bounded() -> None:
    cache: ContentCache[ProxyTool] = ContentCache(max_entries=3, max_bytes=64 * 1000)
    tools = [cache.get_or_make(tool_entry(f"tool_{i}"), ProxyTool.from_openai) for i in range(5)]
    assert len(cache) == 3
    assert cache.get_or_make(tool_entry(f"tool_{4}"), ProxyTool.from_openai) is tools[4]
    assert cache.get_or_make(tool_entry(f"tool_{0}"), ProxyTool.from_openai) is not tools[0]  # oldest out
    small: ContentCache[ProxyTool] = ContentCache(max_entries=100, max_bytes=64 * 100)  # no entry of ~150 bytes fits
    big = small.get_or_make(tool_entry(), ProxyTool.from_openai)
    assert len(small) == 0 and small.get_or_make(tool_entry(), ProxyTool.from_openai) is not big


def test_a_changed_schema_forgets_what_was_derived() -> None:
    schema = CachingToolSchema(name="lookup", description="old")
    assert describe_tools([schema]) == describe_tools([dict(schema)])  # same text as for a plain schema
    assert "old" in describe_tools([schema])
    schema["description"] = "new"
    assert "new" in describe_tools([schema]) and "old" not in describe_tools([schema])
    schema.update(description="newer")
    assert "newer" in tools_json([schema])


def test_the_request_body_carries_the_tools_as_before() -> None:
    client = OpenAICompatibleClient("m", "http://127.0.0.1:9/v1", create_args={"temperature": 0.5})
    proxy, = proxy_tools_from_openai([tool_entry("é.tool")])
    service = ProxyTool("plain", "a tool given as a Tool object", {"type": "object"})
    tools = [proxy.schema, {"name": "raw", "parameters": {"type": "object"}}, service]
    body = json.loads(client._request_body([], tools, "auto", None, {}))
    assert body["tools"] == [tool_to_openai(t) for t in tools]
    assert body["tool_choice"] == "auto" and body["temperature"] == 0.5 and body["stream"] is True
    assert "tools" not in json.loads(client._request_body([], [], "auto", None, {}))
