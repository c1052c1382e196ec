"""Conversation conversion (``agents/_conversation.py``): OpenAI messages to AutoGen's, repairs and
strictness, the reasoner's transcript."""

from __future__ import annotations

import time
from typing import Any

import pytest
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    SystemMessage,
    UserMessage,
)
from duet.agents import CacheMark, ConversationError, cache_marks_from_openai, conversation_from_openai
from duet.agents._conversation import (
    DUET_CALL_ID,
    MISSING_RESULT,
    ImageURL,
    as_transcript,
    ends_with_tool_results,
    last_user_text,
)
from duet.workbenches import model_safe_name


def test_plain_text_turns_convert_like_every_other_turn() -> None:
    """Plain text turns take a short way (most of a long history); a call left without a result is
    still closed before the next text turn."""
    conversation = conversation_from_openai([
        {"role": "system", "content": "Rules."},
        {"role": "developer", "content": "More rules."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>greet</think>Hello!"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "Never mind."},
        {"role": "assistant", "content": "OK.", "tool_calls": None},
    ])
    assert conversation == [
        SystemMessage(content="Rules."),
        SystemMessage(content="More rules."),
        UserMessage(content="Hi", source="user"),
        AssistantMessage(content="Hello!", source="assistant"),
        AssistantMessage(content=[FunctionCall(id="c1", name="f", arguments="{}")], source="assistant"),
        FunctionExecutionResultMessage(content=[FunctionExecutionResult(content=MISSING_RESULT, call_id="c1", name="f", is_error=True)]),
        UserMessage(content="Never mind.", source="user"),
        AssistantMessage(content="OK.", source="assistant"),
    ]
    assert [m.model_fields_set for m in conversation[:4]] == [{"content"}, {"content"}, {"content", "source"}, {"content", "source"}]
    # A message keeps its set of given fields as long as the stream lasts: the plain ones of a kind share one.
    assert conversation[0].model_fields_set is conversation[1].model_fields_set
    assert conversation[2].model_fields_set is conversation[3].model_fields_set


def test_conversation_repairs_and_strictness() -> None:
    conversation = conversation_from_openai(
        [
            {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "ra"},
            {"role": "tool", "tool_call_id": "zzz", "name": "h", "content": "orphan"},
        ]
    )
    assert isinstance(conversation[0], SystemMessage) and conversation[0].content == "rules"
    assert isinstance(conversation[2], AssistantMessage) and conversation[2].content[0].arguments == '{"x": 1}'  # type: ignore[union-attr]
    results = conversation[3]
    assert isinstance(results, FunctionExecutionResultMessage)
    assert [(r.call_id, r.content) for r in results.content] == [("a", "ra"), ("b", MISSING_RESULT)]
    assert isinstance(conversation[4], UserMessage) and "orphan" in conversation[4].content  # type: ignore[operator]
    with pytest.raises(ConversationError) as error:
        conversation_from_openai([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {}}]}])
    assert error.value.param == "messages[1].tool_calls[0]"


def test_transcript_for_a_reasoner_without_tools() -> None:
    transcript = as_transcript(conversation_from_openai([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "looking", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "42"},
        {"role": "user", "content": "and?"},
    ]))
    assert [type(m).__name__ for m in transcript] == ["UserMessage", "AssistantMessage", "UserMessage"]
    assert transcript[2].content == "[tool f returned]\n42\n\nand?"


def test_transcript_merges_a_long_run_in_linear_time() -> None:
    """4,096 user messages of 7 KB (within the limits) merge into one: rebuilding the merged text
    per message took 2.2 s of event loop; joining once takes milliseconds."""
    conversation = conversation_from_openai([{"role": "system", "content": "s"}]
                                            + [{"role": "user", "content": f"{i}" + "x" * 7168} for i in range(4096)])
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        transcript = as_transcript(conversation)
        best = min(best, time.perf_counter() - started)
    assert [type(m).__name__ for m in transcript] == ["SystemMessage", "UserMessage"]
    assert transcript[1].content == "\n\n".join(m.content for m in conversation[1:])  # type: ignore[misc]
    assert best < 0.3, f"merging took {best:.2f} s"


def test_legacy_function_calls_and_results_become_tool_rounds() -> None:
    conversation = conversation_from_openai([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>hm</think>Calling.", "function_call": {"name": "kb.search", "arguments": None}},
        {"role": "function", "name": "anything", "content": [{"type": "text", "text": "found"}]},
    ])
    assistant, outcome = conversation[1], conversation[2]
    assert isinstance(assistant, AssistantMessage) and assistant.thought == "Calling."  # <think> stripped
    [call] = assistant.content  # type: ignore[misc]
    assert call.name == model_safe_name("kb.search") and call.arguments == "{}" and DUET_CALL_ID.match(call.id)
    assert isinstance(outcome, FunctionExecutionResultMessage)
    assert [(r.call_id, r.name, r.content) for r in outcome.content] == [(call.id, call.name, "found")]
    assert ends_with_tool_results(conversation) and last_user_text(conversation) == "q"


def test_a_new_turn_closes_calls_left_without_results() -> None:
    conversation = conversation_from_openai([
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "never mind"},
    ])
    assert [type(m).__name__ for m in conversation] == ["UserMessage", "AssistantMessage", "FunctionExecutionResultMessage", "UserMessage"]
    assert conversation[2].content[0].content == MISSING_RESULT and conversation[2].content[0].is_error  # type: ignore[union-attr]
    assert not ends_with_tool_results(conversation)


def test_images_are_kept_as_urls() -> None:
    [message] = conversation_from_openai([{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "sharp"}},
        {"type": "image_url", "image_url": "data:image/png;base64,AAAA"},
    ]}])
    text, remote, inline = message.content  # type: ignore[misc]
    assert text == "What is this?" and isinstance(remote, ImageURL) and isinstance(inline, ImageURL)
    assert remote.to_openai_format() == {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "auto"}}
    assert inline.to_base64() == "AAAA" and last_user_text([message]) == "What is this?"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hello", "messages"),
        (["hello"], "messages[0]"),
        ([{"role": "critic", "content": "x"}], "messages[0].role"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
        ([{"role": "user", "content": []}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "audio"}]}], "messages[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0].image_url"),
        ([{"role": "system", "content": [{"type": "image_url"}]}], "messages[0].content[0]"),
        ([{"role": "system", "content": 42}], "messages[0].content"),
        ([{"role": "assistant", "tool_calls": {"id": "a"}}], "messages[0].tool_calls"),
        ([{"role": "assistant", "tool_calls": [{"id": 7, "function": {"name": "f"}}]}], "messages[0].tool_calls[0].id"),
        ([{"role": "assistant", "tool_calls": [{"type": "code", "function": {"name": "f"}}]}], "messages[0].tool_calls[0].type"),
        ([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}, {"id": "a", "function": {"name": "g"}}]}],
         "messages[0].tool_calls[1].id"),
        ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}],
         "messages[0].tool_calls[0].function.arguments"),
        ([{"role": "assistant", "function_call": {"arguments": "{}"}}], "messages[0].function_call"),
    ],
)
def test_unusable_messages_are_named_by_their_param(messages: Any, param: str) -> None:
    with pytest.raises(ConversationError) as error:
        conversation_from_openai(messages)
    assert error.value.param == param


def test_cache_marks_on_openai_content_parts() -> None:
    """OpenRouter's marks: where conversation_from_openai puts the end of each marked part."""
    ephemeral = {"type": "ephemeral"}
    marks = cache_marks_from_openai([
        {"role": "developer", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B", "cache_control": ephemeral}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": ephemeral},
                                     {"type": "image_url", "image_url": {"url": "data:x"}, "cache_control": ephemeral}]},
        {"role": "user", "content": "plain text has no parts to mark"},
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "18°C", "cache_control": ephemeral}]},
    ])
    assert marks == (CacheMark(role="system", text="AB", control=ephemeral), CacheMark(role="user", text="Hi", control=ephemeral),
                     CacheMark(role="tool", text="18°C", control=ephemeral))
