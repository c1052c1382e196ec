"""The OpenAI Responses API (``/v1/responses``) over real HTTP, with the ``openai`` SDK as the client
(its own stream accumulation is the judge of the event sequence) and the scripted upstream as the models."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream, users_words

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def sdk(duet: DuetServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{duet.base_url}/v1", api_key=API_KEY, max_retries=0)


def script_plain(upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Four people", " need", " food."], usage=(12, 3)))
    upstream.script(ANSWER, Reply(content=["Bring ", "sandwiches."], usage=(30, 2)))


def script_call(upstream: ScriptedUpstream, *calls: ScriptedCall) -> None:
    upstream.script(REASONER, Reply(reasoning=["Look it up."], usage=(10, 4)))
    upstream.script(ANSWER, Reply(tool_calls=list(calls) or [ScriptedCall("get_weather", '{"city": "Paris"}')], usage=(20, 6)))


def sse(raw: bytes) -> list[dict[str, Any]]:
    """The events of a Responses stream: ``event:`` + one ``data:`` line each, keep-alive comments aside."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block or block.startswith(":"):
            continue
        head, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert head == f"event: {event['type']}"
        events.append(event)
    return events


def test_create_returns_reasoning_and_message_items_with_summed_usage(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_plain(upstream)
    response = sdk.responses.create(model="duet", input="What should I pack for a picnic?")
    assert response.status == "completed" and response.object == "response" and response.id.startswith("resp_")
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output[0].summary[0].text == "Four people need food."
    assert response.output_text == "Bring sandwiches."
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (42, 5)  # both stages summed
    assert response.usage.output_tokens_details.reasoning_tokens == 3 and response.usage.total_tokens == 47
    asked = upstream.requests_for(ANSWER)[0].body["messages"][-1]
    assert asked["role"] == "user" and users_words(asked["content"]) == "What should I pack for a picnic?"


def test_stream_is_accumulated_by_the_sdk_into_the_stored_response(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_plain(upstream)
    with sdk.responses.stream(model="duet", input="Picnic?", instructions="Be brief.") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.output_text == "Bring sandwiches." and final.output[0].summary[0].text == "Four people need food."
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens == 3
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds[2:6] == ["response.output_item.added", "response.reasoning_summary_part.added",
                          "response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta"]
    assert kinds.count("response.output_text.delta") == 2 and "response.content_part.done" in kinds
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Bring sandwiches."
    stored = sdk.responses.retrieve(final.id)
    assert [item.id for item in stored.output] == [item.id for item in final.output] and stored.usage == final.usage
    assert stored.output_text == final.output_text and stored.instructions == "Be brief."
    assert upstream.requests_for(ANSWER)[0].body["messages"][0]["content"].startswith("Be brief.")  # instructions: the system message


def test_tool_round_trip_through_previous_response_id(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_call(upstream)
    first = sdk.responses.create(model="duet", input="Weather in Paris?", tools=[WEATHER])
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    call = first.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"} and call.call_id.startswith("call_")
    assert first.usage is not None and first.usage.output_tokens == 10

    upstream.script(ANSWER, Reply(content=["Sunny in Paris."]))
    second = sdk.responses.create(model="duet", previous_response_id=first.id, tools=[WEATHER],
                                  input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24C"}])
    assert second.output_text == "Sunny in Paris." and second.previous_response_id == first.id
    messages = upstream.requests_for(ANSWER)[-1].body["messages"]
    assert users_words(messages[-3]["content"]) == "Weather in Paris?"
    issued = messages[-2]["tool_calls"][0]["id"]  # the upstream gets back the id it issued (issue 25), not the client's
    assert issued.startswith("call_up") and issued != call.call_id and messages[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert messages[-1] == {"role": "tool", "tool_call_id": issued, "content": "sunny, 24C"}
    assert len(upstream.requests_for(REASONER)) == 1  # a round that only brings tool results skips the reasoner


def test_tool_round_trip_by_replaying_the_whole_input(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_call(upstream, ScriptedCall("get_weather", '{"city": "Oslo"}'), ScriptedCall("get_weather", '{"city": "Rome"}'))
    first = sdk.responses.create(model="duet", input="Oslo and Rome?", tools=[WEATHER], store=False)
    calls = [item for item in first.output if item.type == "function_call"]
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Oslo", "Rome"]  # parallel calls, two items
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(first.id)  # store: false keeps nothing

    upstream.script(ANSWER, Reply(content=["Both mild."]))
    replay = [{"role": "user", "content": "Oslo and Rome?"}, *[item.model_dump(exclude_none=True) for item in first.output],
              *[{"type": "function_call_output", "call_id": c.call_id, "output": f"{i} C"} for i, c in enumerate(calls)]]
    second = sdk.responses.create(model="duet", input=replay, tools=[WEATHER], store=False)
    assert second.output_text == "Both mild."
    messages = upstream.requests_for(ANSWER)[-1].body["messages"]
    sent_ids = [c["id"] for c in messages[-3]["tool_calls"]]  # one assistant turn, both calls, with the upstream's own ids
    assert len(sent_ids) == 2 and all(i.startswith("call_up") for i in sent_ids) and [m["tool_call_id"] for m in messages[-2:]] == sent_ids
    assert [m["content"] for m in messages[-2:]] == ["0 C", "1 C"]
    # The replayed reasoning item is dropped: the reasoning is there once, as Duet's note after the question (issue 26).
    assert json.dumps(messages).count("Look it up") == 1 and "<reasoning>\nLook it up." in messages[1]["content"]


def test_streamed_parallel_calls_are_accumulated(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_call(upstream, ScriptedCall("get_weather", '{"city": "Oslo"}'), ScriptedCall("get_weather", '{"city": "Rome"}'))
    with sdk.responses.stream(model="duet", input="Oslo and Rome?", tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Oslo", "Rome"] and len({c.call_id for c in calls}) == 2
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [e.arguments for e in done] == [c.arguments for c in calls]


def test_custom_namespace_and_hosted_tools_are_mapped(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    tools: list[Any] = [
        {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
        {"type": "namespace", "name": "crm", "description": "The CRM.", "tools": [
            {"type": "function", "name": "find", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]},
        {"type": "web_search"},
    ]
    script_call(upstream, ScriptedCall("crm__find", '{"q": "Ada"}'), ScriptedCall("apply_patch", '{"input": "*** Begin Patch"}'))
    response = sdk.responses.create(model="duet", input="Find Ada, then patch.", tools=tools)
    sent = upstream.requests_for(ANSWER)[0].body["tools"]
    assert [t["function"]["name"] for t in sent] == ["apply_patch", "crm__find"]  # the hosted tool is dropped
    assert sent[0]["function"]["parameters"]["required"] == ["input"]
    find, patch = response.output[1:]
    assert (find.type, find.name, find.namespace, find.arguments) == ("function_call", "find", "crm", '{"q": "Ada"}')
    assert (patch.type, patch.name, patch.input) == ("custom_tool_call", "apply_patch", "*** Begin Patch")

    upstream.script(ANSWER, Reply(content=["Done."]))
    replay = [{"role": "user", "content": "Find Ada, then patch."}, find.model_dump(exclude_none=True), patch.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": find.call_id, "output": "Ada: found"},
              {"type": "custom_tool_call_output", "call_id": patch.call_id, "output": "patched"}]
    assert sdk.responses.create(model="duet", input=replay, tools=tools).output_text == "Done."
    calls = upstream.requests_for(ANSWER)[-1].body["messages"][-3]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("crm__find", {"q": "Ada"}), ("apply_patch", {"input": "*** Begin Patch"})]


def test_item_references_resolve_from_the_stored_response(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_call(upstream)
    first = sdk.responses.create(model="duet", input="Weather in Paris?", tools=[WEATHER])
    call = first.output[1]
    upstream.script(ANSWER, Reply(content=["Sunny."]))
    second = sdk.responses.create(model="duet", tools=[WEATHER], input=[
        {"role": "user", "content": "Weather in Paris?"}, *[{"type": "item_reference", "id": item.id} for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert second.output_text == "Sunny."
    assert upstream.requests_for(ANSWER)[-1].body["messages"][-2]["tool_calls"][0]["id"].startswith("call_up")  # the upstream's own id


def test_request_options_reach_the_answer_model(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}, "required": ["items"]}
    upstream.script(ANSWER, Reply(content=['{"items": ["bread"'], finish_reason="length"))
    response = sdk.responses.create(
        model="duet", input=[{"role": "developer", "content": "JSON only."}, {"role": "user", "content": [{"type": "input_text", "text": "List."}]}],
        max_output_tokens=7, temperature=0.2, top_p=0.9, user="u-1", metadata={"app": "test"}, reasoning={"effort": "low"},
        text={"format": {"type": "json_schema", "name": "packing", "schema": schema, "strict": True}},
        include=["reasoning.encrypted_content"], extra_body={"client_metadata": {"x": "y"}})
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens" and response.metadata == {"app": "test"}
    body = upstream.requests_for(ANSWER)[0].body
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["user"]) == (7, 0.2, 0.9, "u-1")
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "packing", "schema": schema, "strict": True}}
    assert body["messages"][0]["role"] == "system" and "JSON only." in body["messages"][0]["content"]


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi", "tools": [{"type": "computer_use_v9"}]}, "tools[0].type"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]}, "tools[0].parameters"),
    ({"input": "hi", "tools": [{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0].type"),
    ({"input": [{"type": "message", "role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": ""}, "input"),
    ({"input": "hi", "temperature": 5}, "temperature"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": "hi", "tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice"),
    ({"tools": []}, "input"),
])
def test_invalid_requests_get_400_naming_the_param_and_no_model_call(http: httpx.Client, upstream: ScriptedUpstream,
                                                                     body: dict[str, Any], param: str) -> None:
    for stream in (False, True):
        response = http.post("/v1/responses", json={"model": "duet", "stream": stream, **body})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error", error
    assert upstream.requests == []


def test_unknown_ids_are_404(sdk: openai.OpenAI, http: httpx.Client, upstream: ScriptedUpstream) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        sdk.responses.create(model="duet", previous_response_id="resp_nope", input="and then?")
    assert raised.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve("resp_nope")
    missing = http.post("/responses", json={"model": "duet", "input": [{"type": "item_reference", "id": "fc_nope"}]})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "input[0].id"
    assert http.post("/v1/responses", json={"model": "nope", "input": "hi"}).json()["error"]["code"] == "model_not_found"
    assert upstream.requests == []


def test_upstream_fault_before_the_first_byte_is_an_http_status(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(status=429, error_message="slow down", headers={"Retry-After": "30"}))  # beyond the retry bound
    with pytest.raises(openai.RateLimitError) as raised:
        with sdk.responses.stream(model="duet", input="hi") as stream:
            list(stream)
    assert raised.value.response.headers["retry-after"] == "30"
    upstream.script(ANSWER, *[Reply(status=500)] * 3)  # retried, then given up (a reasoner that is down: answered alone)
    with pytest.raises(openai.APIStatusError) as failed:
        sdk.responses.create(model="duet", input="hi")
    assert failed.value.status_code == 502 and failed.value.body["code"] == "upstream_error"  # type: ignore[index]


def test_upstream_fault_after_the_first_byte_is_response_failed(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["a", "b", "c", "d"]))
    upstream.script(ANSWER, Reply(content=["one ", "two ", "three"], fault="disconnect", fault_after=2))
    response = http.post("/v1/responses", json={"model": "duet", "input": "hi", "stream": True})
    assert response.status_code == 200
    events = sse(response.content)
    assert events[-1]["type"] == "response.failed" and [e["type"] for e in events].count("response.failed") == 1
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "upstream_disconnected"
    assert failed["output"][-1]["type"] == "message" and failed["output"][-1]["status"] == "incomplete"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_sdk_stream_reports_a_failed_response(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["a"]))
    upstream.script(ANSWER, Reply(content=["one ", "two"], fault="disconnect", fault_after=1))
    with sdk.responses.stream(model="duet", input="hi") as stream:
        kinds = [event.type for event in stream]
        with pytest.raises(RuntimeError, match=r"response.completed"):
            stream.get_final_response()
    assert kinds[-1] == "response.failed"


@pytest.fixture
def lone_duet(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """A server of this module's own: a store that is down (nothing listens at its Redis URL)."""
    from tests.conftest import free_port

    directory = tmp_path_factory.mktemp("responses-outage")
    server = DuetServer([], {"DUET_MODEL_NAME": "duet", "DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
                             "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER,
                             "DUET_STATE_URL": f"redis://127.0.0.1:{free_port()}/0", "DUET_STORE_TIMEOUT": "0.5"},
                        directory / "duet.log")
    yield server
    server.stop()


def test_store_outage_keeps_answering_and_refuses_what_needs_the_store(lone_duet: DuetServer, upstream: ScriptedUpstream) -> None:
    sdk = openai.OpenAI(base_url=f"{lone_duet.base_url}/v1", api_key="unused", max_retries=0)
    script_plain(upstream)
    response = sdk.responses.create(model="duet", input="hi")  # cannot be stored: answered all the same
    assert response.output_text == "Bring sandwiches."
    for call in (lambda: sdk.responses.retrieve(response.id),
                 lambda: sdk.responses.create(model="duet", previous_response_id=response.id, input="more")):
        with pytest.raises(openai.APIStatusError) as raised:
            call()
        assert raised.value.status_code == 503 and raised.value.body["code"] == "store_unavailable"  # type: ignore[index]
    assert "Traceback" not in lone_duet.log.read_text()


def test_shutdown_ends_a_running_stream_with_one_response_failed(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = DuetServer([], {"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
                             "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER,
                             "DUET_PING_INTERVAL": "0.2", "DUET_SHUTDOWN_TIMEOUT": "1.0"}, tmp_path / "duet.log")
    try:
        upstream.script(REASONER, Reply(reasoning=[f"step {i} " for i in range(200)], delay_between=0.05))
        with httpx.stream("POST", f"{server.base_url}/v1/responses", json={"model": "duet", "input": "hi", "stream": True},
                          timeout=30) as response:
            assert response.status_code == 200
            received, signalled = b"", False
            for chunk in response.iter_raw():  # raises if the connection is cut before the stream's clean end
                received += chunk
                if not signalled and b"reasoning_summary_text.delta" in received:
                    server.process.send_signal(signal.SIGTERM)  # mid-stream; the drain time (1 s) is shorter than the reasoning
                    signalled = True
        events = sse(received)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert [e["type"] for e in events].count("response.failed") == 1 and events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["error"]["code"] == "server_shutting_down"
        server.process.wait(timeout=10)
        assert "Traceback" not in server.log.read_text()
    finally:
        server.stop()
