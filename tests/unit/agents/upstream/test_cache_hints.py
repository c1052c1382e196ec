"""Which upstreams get prompt-cache hints, and the client's marks on the wire (``agents/upstream/_cache_hints.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from autogen_core.models import SystemMessage, UserMessage

from duet.agents import CacheMark, OpenAICompatibleClient
from duet.agents.upstream import CACHE_MARKS_ARG
from duet.agents.upstream._cache_hints import CACHE_KEY_HOSTS, CACHE_MARK_HOSTS, mark_messages, takes_hint

EPHEMERAL = {"type": "ephemeral"}


@pytest.mark.parametrize(("setting", "base_url", "takes"), [
    ("auto", "https://openrouter.ai/api/v1", True),
    ("auto", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", True),
    ("auto", "https://eu.openrouter.ai/api/v1", True),  # a subdomain
    ("auto", "https://notopenrouter.ai/v1", False),
    ("auto", "http://localhost:11434/v1", False),
    ("auto", "not a url at all", False),
    ("on", "http://localhost:8000/v1", True),
    ("off", "https://openrouter.ai/api/v1", False),
])
def test_which_upstreams_take_marks(setting: Any, base_url: str, takes: bool) -> None:
    assert takes_hint(setting, base_url, CACHE_MARK_HOSTS) is takes


def test_only_openai_takes_a_derived_cache_key_by_default() -> None:
    assert takes_hint("auto", "https://api.openai.com/v1", CACHE_KEY_HOSTS)
    assert not takes_hint("auto", "https://openrouter.ai/api/v1", CACHE_KEY_HOSTS)


def test_a_mark_goes_to_the_latest_message_that_begins_with_its_text() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go on."}, {"role": "assistant", "content": "Done."},
                                      {"role": "user", "content": "Go on.\n\n<reasoning>\nx\n</reasoning>"}]
    mark_messages(messages, [CacheMark(role="user", text="Go on.", control=EPHEMERAL)])
    assert messages[0]["content"] == "Go on."
    assert messages[2]["content"] == [{"type": "text", "text": "Go on.", "cache_control": EPHEMERAL},
                                      {"type": "text", "text": "\n\n<reasoning>\nx\n</reasoning>"}]


def test_a_system_mark_ends_inside_the_merged_system_message() -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Ours.\n\nTheirs.\n\nPreamble."}]
    mark_messages(messages, [CacheMark(role="system", text="Theirs.", control=EPHEMERAL)])
    assert messages[0]["content"] == [{"type": "text", "text": "Ours.\n\nTheirs.", "cache_control": EPHEMERAL},
                                      {"type": "text", "text": "\n\nPreamble."}]


def test_a_mark_on_a_part_and_a_mark_that_finds_nothing() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                                                   {"type": "image_url", "image_url": {"url": "data:x"}}]}]
    mark_messages(messages, [CacheMark(role="user", text="Look:", control=EPHEMERAL),
                             CacheMark(role="assistant", text="Never said.", control=EPHEMERAL)])
    assert messages[0]["content"][0] == {"type": "text", "text": "Look:", "cache_control": EPHEMERAL}
    assert len(messages) == 1 and "cache_control" not in messages[0]["content"][1]


def body_of(client: OpenAICompatibleClient, marks: tuple[CacheMark, ...]) -> dict[str, Any]:
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {}}}]
    raw = client._request_body([SystemMessage(content="Be brief."), UserMessage(content="Hi", source="user")], tools, "auto", None,
                               {CACHE_MARKS_ARG: marks, "temperature": 0})
    return json.loads(raw)


def test_the_client_sends_marks_only_where_its_upstream_takes_them() -> None:
    marks = (CacheMark(role="system", text="Be brief.", control=EPHEMERAL), CacheMark(role="tools", text="f", control=EPHEMERAL))
    sent = body_of(OpenAICompatibleClient("m", "https://openrouter.ai/api/v1"), marks)
    assert sent["messages"][0]["content"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert sent["tools"][0]["cache_control"] == EPHEMERAL and sent["temperature"] == 0
    dropped = body_of(OpenAICompatibleClient("m", "http://localhost:11434/v1"), marks)
    assert "cache_control" not in json.dumps(dropped) and CACHE_MARKS_ARG not in dropped and dropped["temperature"] == 0


def test_several_marks_in_one_message_each_end_their_block() -> None:
    """Claude Code marks more than one system block: each mark cuts the text where its block ends."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Header.\n\nInstructions.\n\nPreamble."}]
    mark_messages(messages, [CacheMark(role="system", text="Header.\n\nInstructions.", control={"n": 2}),
                             CacheMark(role="system", text="Header.", control={"n": 1})])
    assert messages[0]["content"] == [{"type": "text", "text": "Header.", "cache_control": {"n": 1}},
                                      {"type": "text", "text": "\n\nInstructions.", "cache_control": {"n": 2}},
                                      {"type": "text", "text": "\n\nPreamble."}]
