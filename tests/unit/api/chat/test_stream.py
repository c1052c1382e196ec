"""The byte encoder writes what the wire models say: every ``ChunkEncoder`` method's output, parsed
as JSON, is the ``model_dump(mode="json")`` of the matching model in ``duet.api.chat._protocol``, for any
text, framed as one ``data: ...`` block Dify's parser keeps."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from duet.api._sse import PING
from duet.api.chat._stream import DONE, ChunkEncoder
from duet.api._errors import APIError
from duet.api._wire import ErrorBody
from duet.api.chat._protocol import ChatCompletionChunk, ChoiceDelta, ChoiceDeltaFunctionCall, ChoiceDeltaToolCall, ChunkChoice, CompletionUsage

# Any text a model or a client may send, without lone surrogates (not encodable as UTF-8: no response carries them).
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
AWKWARD = ["", '"quoted" \\ back', "line\nbreak\r\n\ttab", "</think>", "<think>\n", "\u2028\u2029", "日本語 🙂", "\x00\x1f\x7f", "data: [DONE]\n\n"]
ID = "chatcmpl-0123abcd"
CREATED = 1_700_000_000
MODEL = "duet"


def parsed(block: bytes) -> Any:
    """The JSON of one SSE event, checked to be framed as Dify needs: ``data: <one line>`` and a blank line."""
    text = block.decode()
    assert text.startswith("data: ") and text.endswith("\n\n"), text
    data = text[len("data: ") : -2]
    assert "\n" not in data and "\r" not in data, data
    return json.loads(data)


def chunk(delta: ChoiceDelta, finish_reason: Any = None, completion_id: str = ID, model: str = MODEL) -> dict[str, Any]:
    """The model's JSON of a chunk with one choice."""
    choice = ChunkChoice(delta=delta, finish_reason=finish_reason)
    return ChatCompletionChunk(id=completion_id, created=CREATED, model=model, choices=[choice]).model_dump(mode="json")


@settings(max_examples=200)
@given(text=TEXT)
@example(text="")
@example(text=AWKWARD[1])
@example(text=AWKWARD[2])
@example(text=AWKWARD[3])
@example(text=AWKWARD[5])
@example(text=AWKWARD[6])
@example(text=AWKWARD[7])
@example(text=AWKWARD[8])
def test_text_deltas(text: str) -> None:
    encoder = ChunkEncoder(ID, CREATED, MODEL)
    assert parsed(encoder.content(text)) == chunk(ChoiceDelta(content=text))
    assert parsed(encoder.reasoning(text)) == chunk(ChoiceDelta(reasoning_content=text))


@settings(max_examples=100)
@given(completion_id=TEXT, model=TEXT, created=st.integers(0, 2**40))
@example(completion_id='chatcmpl-"x"', model="qwen2.5:7b \u00e9\n", created=0)
def test_the_fixed_part_of_every_chunk(completion_id: str, model: str, created: int) -> None:
    encoder = ChunkEncoder(completion_id, created, model)
    expected = ChatCompletionChunk(id=completion_id, created=created, model=model,
                                   choices=[ChunkChoice(delta=ChoiceDelta(role="assistant", content=""))])
    assert parsed(encoder.role()) == expected.model_dump(mode="json")
    usage = ChatCompletionChunk(id=completion_id, created=created, model=model, choices=[], usage=CompletionUsage.of(3, 4))
    assert parsed(encoder.usage(3, 4)) == usage.model_dump(mode="json")


@settings(max_examples=100)
@given(index=st.integers(0, 64), call_id=TEXT, name=TEXT, arguments=TEXT)
@example(index=0, call_id="call_1", name="kb.search/ü", arguments='{"q": "a \\"b\\"\\n"}')
def test_tool_call_chunks(index: int, call_id: str, name: str, arguments: str) -> None:
    encoder = ChunkEncoder(ID, CREATED, MODEL)
    head = ChoiceDeltaToolCall(index=index, id=call_id, type="function", function=ChoiceDeltaFunctionCall(name=name, arguments=""))
    assert parsed(encoder.tool_call_head(index, call_id, name)) == chunk(ChoiceDelta(tool_calls=[head]))
    more = ChoiceDeltaToolCall(index=index, function=ChoiceDeltaFunctionCall(arguments=arguments))
    assert parsed(encoder.tool_call_arguments(index, arguments)) == chunk(ChoiceDelta(tool_calls=[more]))


@settings(max_examples=100)
@given(name=TEXT, arguments=TEXT)
def test_legacy_function_call_chunks(name: str, arguments: str) -> None:
    encoder = ChunkEncoder(ID, CREATED, MODEL)
    head = ChoiceDeltaFunctionCall(name=name, arguments="")
    assert parsed(encoder.function_call_head(name)) == chunk(ChoiceDelta(function_call=head))
    assert parsed(encoder.function_call_arguments(arguments)) == chunk(ChoiceDelta(function_call=ChoiceDeltaFunctionCall(arguments=arguments)))


def test_finish_chunks() -> None:
    encoder = ChunkEncoder(ID, CREATED, MODEL)
    for reason in ("stop", "length", "tool_calls", "content_filter", "function_call"):
        assert parsed(encoder.finish(reason)) == chunk(ChoiceDelta(), finish_reason=reason)


@settings(max_examples=50)
@given(message=TEXT)
def test_error_event(message: str) -> None:
    error = APIError(502, message, type="upstream_error", code="upstream_error")
    assert parsed(ChunkEncoder.error(error.body())) == ErrorBody(error=error.detail).model_dump(mode="json")


def test_the_fixed_blocks() -> None:
    assert DONE == b"data: [DONE]\n\n"
    assert PING == b": ping\n\n"  # a comment block: Dify drops blocks that start with ':'
