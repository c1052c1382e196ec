"""The stream accumulator of the upstream client, without sockets: chunks in, pieces and a result out.

The model-client tests (test_client.py, test_sse.py beside this file) and the dialect replays (tests/http/test_replays.py) run the same code
through real connections; here each branch of reading an OpenAI chunk stream is taken on its own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from autogen_core import FunctionCall

from duet.agents._errors import UpstreamConnectionError, UpstreamProtocolError, UpstreamStatusError
from duet.agents._thinking import ReasoningText
from duet.agents._upstream_calls import UpstreamCall
from duet.agents.upstream._accumulator import JOINED_CHARS, JOINED_CHUNKS, StreamAccumulator


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **fields: Any) -> bytes:
    """The ``data`` of one chunk with one choice (``delta``), as a server sends it."""
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
                       **fields}).encode()


def data(value: Any) -> bytes:
    return json.dumps(value).encode()


def typed(pieces: list[str]) -> list[tuple[str, str]]:
    return [("reasoning" if type(piece) is ReasoningText else "text", str(piece)) for piece in pieces]


def finished(stream: StreamAccumulator, *reads: list[bytes]) -> StreamAccumulator:
    for events in reads:
        stream.read(events)
    return stream


# The pieces handed on ------------------------------------------------------------------------------


def test_the_first_token_goes_alone_then_a_read_is_one_piece() -> None:
    stream = StreamAccumulator("m")
    assert stream.awaiting_first_token
    pieces = stream.read([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
                          chunk({"content": " there"})])
    assert pieces == ["Hel", "lo there"] and stream.first_piece == 0 and not stream.awaiting_first_token
    assert stream.read([chunk({"content": "!"}), chunk({"content": "?"})]) == ["!?"] and stream.first_piece == -1


def test_a_read_without_text_hands_on_nothing_and_still_awaits_the_first_token() -> None:
    stream = StreamAccumulator("m")
    assert stream.read([chunk({"role": "assistant", "content": ""}), chunk({})]) == []
    assert stream.awaiting_first_token and stream.first_piece == -1 and stream.answered
    assert stream.read([chunk({"content": "a"})]) == ["a"] and stream.first_piece == 0


def test_pieces_join_at_most_JOINED_CHUNKS_chunks() -> None:
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"content": str(n % 10)}) for n in range(2 + 2 * JOINED_CHUNKS)])
    assert [len(piece) for piece in pieces] == [1, JOINED_CHUNKS, JOINED_CHUNKS, 1]
    assert "".join(pieces) == "".join(str(n % 10) for n in range(2 + 2 * JOINED_CHUNKS))


def test_pieces_join_at_most_JOINED_CHARS_characters() -> None:
    stream = StreamAccumulator("m")
    big = "x" * (JOINED_CHARS // 2)
    pieces = stream.read([chunk({"content": "a"})] + [chunk({"content": big})] * 5)
    assert [len(piece) for piece in pieces] == [1, JOINED_CHARS, JOINED_CHARS, len(big)]


def test_reasoning_and_answer_are_pieces_of_their_own_in_order() -> None:
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"reasoning_content": "Think"}), chunk({"reasoning_content": "ing."}),
                          chunk({"content": "An"}), chunk({"content": "swer"}), chunk({"reasoning_content": "Again."}),
                          chunk({"content": "Done"})])
    assert typed(pieces) == [("reasoning", "Think"), ("reasoning", "ing."), ("text", "Answer"), ("reasoning", "Again."),
                             ("text", "Done")]
    assert stream.first_piece == 0


def test_reasoning_and_answer_in_one_first_chunk_the_answer_is_the_first_token() -> None:
    """As before the split: the reasoning goes on as a piece of its own, and the answer text that
    followed it in the same chunk is what is handed on alone."""
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"reasoning_content": "r", "content": "c"}), chunk({"content": "d"})])
    assert typed(pieces) == [("reasoning", "r"), ("text", "c"), ("text", "d")] and stream.first_piece == 1


# Reasoning spellings --------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_in_either_spelling(field: str) -> None:
    stream = finished(StreamAccumulator("m"), [chunk({field: "Plan."}), chunk({"content": "Hi"}, "stop"), b"[DONE]"])
    result = stream.result()
    assert stream.reasoning_field == field == result.reasoning_field
    assert result.thought == "Plan." and result.content == "Hi" and result.reasoning_details is None


def test_reasoning_content_wins_over_reasoning_in_one_delta() -> None:
    stream = StreamAccumulator("m")
    assert typed(stream.read([chunk({"reasoning_content": "A", "reasoning": "B"})])) == [("reasoning", "A")]
    assert stream.reasoning_field == "reasoning_content"


def test_the_first_spelling_seen_is_kept() -> None:
    stream = finished(StreamAccumulator("m"), [chunk({"reasoning": "a"}), chunk({"reasoning_content": "b"})])
    assert stream.reasoning_field == "reasoning" and stream.result().thought == "ab"


def test_empty_reasoning_is_no_reasoning() -> None:
    stream = StreamAccumulator("m")
    assert stream.read([chunk({"reasoning_content": "", "reasoning": None, "content": "x"})]) == ["x"]
    assert stream.reasoning_field is None and stream.result().thought is None


# reasoning_details ---------------------------------------------------------------------------------


def test_details_alone_are_the_reasoning_and_merge_into_the_result() -> None:
    fragments = [{"type": "reasoning.text", "text": "Check ", "index": 0, "format": "unknown"},
                 {"type": "reasoning.text", "text": "units.", "index": 0},
                 {"type": "reasoning.text", "text": "", "index": 0, "signature": "sig"}]
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"reasoning_details": [fragment]}) for fragment in fragments] + [chunk({"content": "5 km"}, "stop")])
    assert typed(pieces) == [("reasoning", "Check "), ("reasoning", "units."), ("text", "5 km")]
    result = stream.result()
    assert result.reasoning_field == "reasoning_details" and result.thought == "Check units."
    assert result.reasoning_details == [{"type": "reasoning.text", "text": "Check units.", "index": 0, "format": "unknown",
                                         "signature": "sig"}]


def test_details_beside_spelled_reasoning_name_the_field_but_the_text_is_the_spelled_one() -> None:
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"reasoning": "plain", "reasoning_details": [{"type": "reasoning.text", "text": "detail", "index": 0}]})])
    assert typed(pieces) == [("reasoning", "plain")] and stream.reasoning_field == "reasoning_details"


def test_details_after_spelled_reasoning_take_over_the_field() -> None:
    stream = finished(StreamAccumulator("m"), [chunk({"reasoning_content": "a"}),
                                               chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "x", "index": 1}]})])
    assert stream.reasoning_field == "reasoning_details" and stream.result().thought == "a"  # encrypted details have no text


@pytest.mark.parametrize("details", [[], {"type": "reasoning.text", "text": "not a list"}, "text"])
def test_details_that_are_not_a_list_of_fragments_are_ignored(details: Any) -> None:
    stream = StreamAccumulator("m")
    assert stream.read([chunk({"reasoning_details": details, "content": "x"})]) == ["x"]
    assert stream.reasoning_field is None and stream.result().reasoning_details is None


# Tool calls -----------------------------------------------------------------------------------------


def calls_of(*deltas: list[dict[str, Any]]) -> list[FunctionCall]:
    stream = finished(StreamAccumulator("m"), [chunk({"tool_calls": tool_deltas}) for tool_deltas in deltas] + [chunk({}, "tool_calls")])
    result = stream.result()
    assert result.finish_reason == "function_calls"
    return result.content  # type: ignore[return-value]


def test_tool_call_deltas_by_index_interleaved() -> None:
    calls = calls_of([{"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}],
                     [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": '{"b"'}}],
                     [{"index": 0, "function": {"arguments": '{"a": 1}'}}],
                     [{"index": 1, "function": {"arguments": ": 2}"}}])
    assert calls == [FunctionCall(id="call_a", name="f", arguments='{"a": 1}'), FunctionCall(id="call_b", name="g", arguments='{"b": 2}')]


def test_tool_calls_come_out_in_index_order() -> None:
    calls = calls_of([{"index": 2, "id": "c2", "function": {"name": "late"}}], [{"index": 0, "id": "c0", "function": {"name": "early"}}])
    assert [call.name for call in calls] == ["early", "late"]


def test_tool_call_deltas_without_index_an_id_starts_a_call_none_continues_the_last() -> None:
    calls = calls_of([{"id": "call_a", "function": {"name": "f", "arguments": '{"x"'}}],
                     [{"function": {"arguments": ": 1}"}}],
                     [{"id": "call_b", "function": {"name": "g", "arguments": "{}"}}],
                     [{"function": {"arguments": ""}}])
    assert calls == [FunctionCall(id="call_a", name="f", arguments='{"x": 1}'), FunctionCall(id="call_b", name="g", arguments="{}")]


def test_a_first_tool_call_delta_without_index_or_id_starts_a_call() -> None:
    assert calls_of([{"function": {"name": "f", "arguments": "{}"}}]) == [FunctionCall(id="", name="f", arguments="{}")]


def test_a_tool_call_name_repeated_in_every_delta_or_split_across_them() -> None:
    repeated = calls_of([{"index": 0, "id": "c", "function": {"name": "get_weather"}}],
                        [{"index": 0, "function": {"name": "get_weather", "arguments": "{}"}}])
    split = calls_of([{"index": 0, "id": "c", "function": {"name": "get_"}}], [{"index": 0, "function": {"name": "weather"}}])
    assert [call.name for call in repeated + split] == ["get_weather", "get_weather"]


def test_tool_call_arguments_as_an_object_and_missing_arguments() -> None:
    calls = calls_of([{"index": 0, "id": "c0", "function": {"name": "f", "arguments": {"city": "Oslo"}}}],
                     [{"index": 1, "id": "c1", "function": {"name": "g"}}])
    assert [json.loads(call.arguments) for call in calls] == [{"city": "Oslo"}, {}]


def test_the_first_id_of_a_tool_call_is_kept() -> None:
    assert calls_of([{"index": 0, "id": "first", "function": {"name": "f"}}], [{"index": 0, "id": "second"}])[0].id == "first"


def test_a_tool_call_ends_the_wait_for_the_first_token_and_the_text_beside_it_is_the_thought() -> None:
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"reasoning": "Look it up."}), chunk({"content": "Checking."}),
                          chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]})])
    assert typed(pieces) == [("reasoning", "Look it up."), ("text", "Checking.")]
    stream = StreamAccumulator("m")
    assert stream.read([chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]})]) == []
    assert not stream.awaiting_first_token
    assert stream.read([chunk({"content": "a"}), chunk({"content": "b"})]) == ["ab"] and stream.first_piece == -1
    stream = finished(StreamAccumulator("m"), [chunk({"reasoning_content": "r"}), chunk({"content": "said"}),
                                               chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})])
    assert stream.result().thought == "said"
    stream = finished(StreamAccumulator("m"), [chunk({"reasoning_content": "r"}),
                                               chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})])
    assert stream.result().thought == "r"



def test_a_stream_whose_reader_keeps_the_text_keeps_none_of_it_and_hands_on_the_same_pieces() -> None:
    reads = [[chunk({"reasoning_content": "Think"}), chunk({"reasoning_content": " more."})], [chunk({"content": "Said."})],
             [chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}), chunk({}, "tool_calls")]]
    kept, unkept = StreamAccumulator("m"), StreamAccumulator("m", keep_text=False)
    assert [typed(kept.read(events)) for events in reads] == [typed(unkept.read(events)) for events in reads]
    result = unkept.result()
    assert result.content == [FunctionCall(id="c", name="f", arguments="{}")] and result.thought is None
    assert kept.result().thought == "Said."
    text_only = finished(StreamAccumulator("m", keep_text=False), [chunk({"reasoning_content": "r"}), chunk({"content": "a"}, "stop")])
    assert text_only.result().content == "" and text_only.result().thought is None and text_only.result().finish_reason == "stop"


# Usage and finish reason ----------------------------------------------------------------------------

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "completion_tokens_details": {"reasoning_tokens": 5}}


def test_usage_on_a_trailing_chunk_without_choices() -> None:
    stream = finished(StreamAccumulator("m"), [chunk({"content": "x"}, "stop"), data({"choices": [], "usage": USAGE}), b"[DONE]"])
    result = stream.result()
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.reasoning_tokens) == (11, 7, 5)


def test_usage_on_the_finish_chunk_and_the_last_one_wins() -> None:
    early = {"prompt_tokens": 1, "completion_tokens": 1}
    stream = finished(StreamAccumulator("m"), [chunk({"content": "x"}, usage=early), chunk({}, "stop", usage=USAGE)])
    assert stream.result().usage.prompt_tokens == 11
    stream = finished(StreamAccumulator("m"), [chunk({"content": "x"}, "stop", usage=USAGE), data({"choices": [], "usage": None})])
    assert stream.result().usage.completion_tokens == 7  # an empty usage is no usage


def test_no_usage_counts_nothing() -> None:
    result = finished(StreamAccumulator("m"), [chunk({"content": "x"}, "stop")]).result()
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.reasoning_tokens) == (0, 0, 0)


@pytest.mark.parametrize("finish, expected", [("stop", "stop"), ("length", "length"), ("tool_calls", "function_calls"),
                                              ("function_call", "function_calls"), ("content_filter", "content_filter"),
                                              ("something_new", "unknown"), (None, "unknown")])
def test_finish_reasons(finish: str | None, expected: str) -> None:
    stream = finished(StreamAccumulator("m"), [chunk({"content": "x"}, finish), b"[DONE]"])
    assert stream.finish_reason == finish and stream.result().finish_reason == expected


# Errors in the stream, [DONE], chunks that are not chunks -------------------------------------------


def test_an_error_chunk_before_any_answer() -> None:
    stream = StreamAccumulator("m")
    assert stream.read([data({"error": {"message": "Rate limited.", "code": 429, "type": "rate_limit"}}), chunk({"content": "x"})]) == []
    failure = stream.failure
    assert isinstance(failure, UpstreamStatusError) and "sent an error: Rate limited." in str(failure)
    assert failure.upstream_status == 429 and failure.error_type == "rate_limit" and not stream.answered


def test_an_error_chunk_mid_stream_after_the_text_before_it() -> None:
    stream = StreamAccumulator("m")
    pieces = stream.read([chunk({"content": "a"}), chunk({"content": "b"}), data({"error": {"message": "Overloaded."}}),
                          chunk({"content": "never"})])
    assert pieces == ["a", "b"] and "failed mid-stream: Overloaded." in str(stream.failure) and stream.ended and not stream.done
    assert stream.result().content == "ab"  # what came before the error; the chunk after it was not read


def test_vllms_error_object() -> None:
    stream = StreamAccumulator("m")
    stream.read([data({"object": "error", "message": "Bad request.", "type": "BadRequestError", "code": 400})])
    assert isinstance(stream.failure, UpstreamStatusError) and stream.failure.upstream_status == 400
    assert "Bad request." in str(stream.failure)


def test_a_chunk_without_choices_nor_error_is_skipped() -> None:
    stream = StreamAccumulator("m")
    assert stream.read([data({"choices": []}), data({"id": "x"}), chunk({"content": "a"})]) == ["a"]
    assert stream.failure is None and not stream.ended


def test_done_ends_the_read() -> None:
    stream = StreamAccumulator("m")
    assert stream.read([chunk({"content": "a"}), b"[DONE]", chunk({"content": "after"})]) == ["a"]
    assert stream.ended and stream.done and stream.result().content == "a"


@pytest.mark.parametrize("raw, what", [(b"not json", "not JSON"), (b"{\"choices\": [", "not JSON"), (b"[1, 2]", "not a JSON object"),
                                       (b"null", "not a JSON object"), (b'"[DONE]"', "not a JSON object")])
def test_a_chunk_that_is_not_a_json_object_fails_the_stream(raw: bytes, what: str) -> None:
    stream = StreamAccumulator("m")
    assert stream.read([chunk({"content": "a"}), raw, chunk({"content": "b"})]) == ["a"]
    assert isinstance(stream.failure, UpstreamProtocolError) and f"sent a chunk that is {what}" in str(stream.failure)
    assert stream.ended and not stream.done


def test_a_delta_that_is_null_or_missing() -> None:
    stream = StreamAccumulator("m")
    assert stream.read([data({"choices": [{"index": 0, "delta": None}]}), data({"choices": [{"index": 0}]})]) == []
    assert stream.answered and stream.failure is None


# How a stream ended ---------------------------------------------------------------------------------


def test_a_stream_that_finished() -> None:
    assert finished(StreamAccumulator("m"), [chunk({"content": "a"}, "stop")]).unfinished("text/event-stream") is None  # no [DONE]
    assert finished(StreamAccumulator("m"), [chunk({"content": "a"}), b"[DONE]"]).unfinished("text/event-stream") is None  # no finish


def test_a_stream_cut_before_the_model_finished() -> None:
    failure = finished(StreamAccumulator("m"), [chunk({"content": "a"})]).unfinished("text/event-stream")
    assert isinstance(failure, UpstreamConnectionError) and "before the model finished" in str(failure)


def test_a_stream_without_an_answer() -> None:
    failure = finished(StreamAccumulator("m"), [data({"choices": []}), b"[DONE]"]).unfinished("text/event-stream")
    assert isinstance(failure, UpstreamProtocolError) and "without an answer (no choices)" in str(failure)
    failure = StreamAccumulator("m").unfinished("text/plain")  # not an event stream, and nothing in it
    assert isinstance(failure, UpstreamProtocolError) and "text/plain that holds no event stream" in str(failure)
    failure = finished(StreamAccumulator("m"), [b"[DONE]"]).unfinished("text/plain")  # [DONE] says it was one
    assert "without an answer (no choices)" in str(failure)


# A whole chat.completion body ------------------------------------------------------------------------


def completion(message: dict[str, Any] | None, finish: str | None = "stop", **fields: Any) -> bytes:
    return data({"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}], **fields})


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_completion_with_reasoning(field: str) -> None:
    pieces, result = StreamAccumulator("m").read_completion(completion({field: "Plan.", "content": "Hi"}, usage=USAGE))
    assert typed(pieces) == [("reasoning", "Plan."), ("text", "Hi")]
    assert (result.thought, result.content, result.reasoning_field, result.reasoning_tokens) == ("Plan.", "Hi", field, 5)
    assert result.usage.prompt_tokens == 11


def test_a_completion_with_details_and_tool_calls() -> None:
    details = [{"type": "reasoning.text", "text": "Look up.", "index": 0, "signature": "s"}]
    calls = [{"id": "c0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
             {"id": "c1", "type": "function", "function": {"name": "g", "arguments": {"b": 2}}}]
    pieces, result = StreamAccumulator("m").read_completion(completion({"reasoning_details": details, "tool_calls": calls}, "tool_calls"))
    assert typed(pieces) == [("reasoning", "Look up.")]
    assert result.content == [FunctionCall(id="c0", name="f", arguments='{"a": 1}'), FunctionCall(id="c1", name="g", arguments='{"b": 2}')]
    assert result.reasoning_field == "reasoning_details" and result.reasoning_details == details and result.thought == "Look up."


def test_a_completion_without_finish_reason_stopped_and_one_without_a_message_is_empty() -> None:
    pieces, result = StreamAccumulator("m").read_completion(completion({"content": "x"}, None))
    assert pieces == ["x"] and result.finish_reason == "stop"
    pieces, result = StreamAccumulator("m").read_completion(completion(None))
    assert pieces == [] and result.content == "" and result.thought is None


@pytest.mark.parametrize("body", [data({"error": {"message": "Nope.", "code": 429}}), data({"object": "error", "message": "Nope."})])
def test_a_completion_that_is_an_error_object(body: bytes) -> None:
    with pytest.raises(UpstreamStatusError, match=r"answered HTTP 200 with an error: Nope."):
        StreamAccumulator("m").read_completion(body)


@pytest.mark.parametrize("body", [b"not json", data([1]), data({"choices": []}), data({"choices": ["x"]}), data({"choices": {"0": {}}})])
def test_a_body_that_is_no_completion(body: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="JSON that is not a chat completion"):
        StreamAccumulator("m").read_completion(body)


# -- the dialects of real model servers (issue 25) ---------------------------------------------------
def dialect_chunk(delta: dict[str, Any] | None = None, finish: str | None = None, choice: dict[str, Any] | None = None,
                  **top: Any) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish, **(choice or {})}], **top}).encode()


def test_magistral_thinking_chunks_are_reasoning() -> None:
    stream = StreamAccumulator("magistral")
    thinking = {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Check."}]}]}
    pieces = stream.read([dialect_chunk(thinking), dialect_chunk({"content": "Hi"}), dialect_chunk({}, "stop"), b"[DONE]"])
    assert [(type(p).__name__, p) for p in pieces] == [("ReasoningText", "Check."), ("str", "Hi")]
    result = stream.result()
    assert (result.content, result.thought) == ("Hi", "Check.")
    whole = {"choices": [{"message": {"content": [thinking["content"][0], {"type": "text", "text": "Hi"}]}, "finish_reason": "stop"}]}
    assert StreamAccumulator("m").read_completion(json.dumps(whole).encode())[1].thought == "Check."


@pytest.mark.parametrize("failure", [
    dialect_chunk({"content": ""}, "error", error={"code": "server_error", "message": "Provider disconnected"}),  # OpenRouter
    dialect_chunk({"content": ""}, "network_error"),  # Zhipu
])
def test_a_finish_that_is_a_failure_fails_the_stream(failure: bytes) -> None:
    stream = StreamAccumulator("m")
    pieces = stream.read([dialect_chunk({"content": "Par"}), failure, b"[DONE]"])
    assert pieces == ["Par"] and stream.ended
    assert isinstance(stream.failure, UpstreamStatusError) and "failed mid-stream" in str(stream.failure)


@pytest.mark.parametrize("finish", [
    dialect_chunk({}, "stop", x_groq={"id": "req_1", "usage": {"prompt_tokens": 3, "completion_tokens": 5}}),  # Groq
    dialect_chunk({}, "stop", choice={"usage": {"prompt_tokens": 3, "completion_tokens": 5}}),  # Moonshot
])
def test_usage_beside_the_finish(finish: bytes) -> None:
    stream = StreamAccumulator("m")
    stream.read([dialect_chunk({"content": "Hi"}), finish, b"[DONE]"])
    assert stream.result().usage.completion_tokens == 5


def test_provider_fields_of_a_tool_call_are_kept() -> None:
    signed = {"index": 0, "id": "function-call-1", "type": "function", "function": {"name": "f", "arguments": "{}"},
              "extra_content": {"google": {"thought_signature": "c2ln"}}}
    stream = StreamAccumulator("gemini")
    stream.read([dialect_chunk({"tool_calls": [signed]}), dialect_chunk({}, "stop"), b"[DONE]"])
    [call] = stream.result().content  # type: ignore[misc]
    assert isinstance(call, UpstreamCall) and call.extra == {"extra_content": {"google": {"thought_signature": "c2ln"}}}
    plain = StreamAccumulator("m")
    plain.read([dialect_chunk({"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {}}]}), dialect_chunk({}, "tool_calls")])
    assert type(plain.result().content[0]) is FunctionCall  # type: ignore[index]


def test_a_tool_call_fragment_costs_few_calls_and_is_put_together_as_before() -> None:
    """A streamed call's fragments are added with at most six calls each (``add`` and what it calls;
    eight before: a keys view, an ``isinstance`` and the id asked for on every fragment): a tool call
    streams its arguments fragment by fragment. What is built is the same: the id of the first
    fragment that has one, the name's new text, the arguments' strings, a provider's extra fields."""
    import sys

    from duet.agents.upstream._accumulator import ToolCallBuilder

    fragments = [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}},
                 {"index": 0, "function": {"arguments": '{"ci'}}, {"index": 0, "function": {"arguments": 'ty": '}},
                 {"index": 0, "id": "call_2", "function": {"name": "weather", "arguments": '"Oslo"}'}}]
    calls: list[str] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            calls.append(event)

    call = ToolCallBuilder()
    sys.setprofile(watch)
    try:
        for fragment in fragments:
            call.add(fragment)
    finally:
        sys.setprofile(None)
    assert len(calls) <= 6 * len(fragments)
    built = call.build()
    assert (built.id, built.name, built.arguments) == ("call_1", "weather", '{"city": "Oslo"}')
    extra = ToolCallBuilder()
    extra.add({"index": 0, "id": "c", "function": {"name": "f", "arguments": {"a": 1}}, "extra_content": {"google": {}}})
    assert extra.build() == UpstreamCall(id="c", name="f", arguments='{"a": 1}', extra={"extra_content": {"google": {}}})
