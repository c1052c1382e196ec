"""Streaming and non-streaming answers, as the openai SDK and a byte-level parser see them."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest

from tests.conftest import ANSWER, API_KEY, REASONER, DuetServer, sse_events
from tests.scripted_upstream import Reply, ScriptedUpstream, users_words

USER = [{"role": "user", "content": "What should I pack for a picnic?"}]


@pytest.fixture
def sdk(duet: DuetServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{duet.base_url}/v1", api_key=API_KEY, max_retries=0)


def script_plain(upstream: ScriptedUpstream) -> None:
    upstream.script(REASONER, Reply(reasoning=["Four people", " need", " food."]))
    upstream.script(ANSWER, Reply(content=["Bring ", "sandwiches."], usage=(30, 2)))


def test_sdk_stream_accumulates_reasoning_and_answer(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_plain(upstream)
    with sdk.chat.completions.stream(model="duet", messages=USER, stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Bring sandwiches."
    assert message.model_extra["reasoning_content"] == "Four people need food."
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.completion_tokens == 3 + 2  # both stages summed
    assert final.usage.prompt_tokens > 30


def test_answer_model_sees_the_reasoning(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_plain(upstream)
    sdk.chat.completions.create(model="duet", messages=USER)
    answer_request = upstream.requests_for(ANSWER)[0].body
    system, user = answer_request["messages"]
    # The reasoning follows the user's message it is about (issue 26: the system message stays the same every turn).
    assert system["role"] == "system" and "Four people need food." not in system["content"]
    assert user["role"] == "user" and users_words(user["content"]) == USER[0]["content"]
    assert user["content"].endswith("\n\n<reasoning>\nFour people need food.\n</reasoning>")


def test_non_stream_completion(sdk: openai.OpenAI, upstream: ScriptedUpstream) -> None:
    script_plain(upstream)
    completion = sdk.chat.completions.create(model="duet", messages=USER)
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "Bring sandwiches."
    assert completion.choices[0].message.model_extra["reasoning_content"] == "Four people need food."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == 5 and completion.usage.prompt_tokens > 30
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_stream_framing_matches_the_dify_contract(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    script_plain(upstream)
    body = {"model": "duet", "stream": True, "messages": USER, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read()
    assert b"\r" not in raw and raw.endswith(b"data: [DONE]\n\n")
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all("choices" in c for c in chunks)
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    for delta in deltas[1:]:
        assert not ("reasoning_content" in delta and "content" in delta), delta
        assert (delta.get("reasoning_content", "x") != "" and delta.get("content", "x") != "") or delta == {}
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finishes == ["stop"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"  # the last chunk with choices
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert (reasoning, content) == ("Four people need food.", "Bring sandwiches.")
    assert [i for i, d in enumerate(deltas) if "reasoning_content" in d] < [i for i, d in enumerate(deltas) if d.get("content")]


def test_no_usage_unless_asked(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Strict clients index ``choices[0]`` of every chunk, and AutoGen ignores the finish reason of a
    chunk that carries usage: without ``stream_options.include_usage`` there is no usage at all."""
    script_plain(upstream)
    raw = http.post("/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}).content
    chunks = sse_events(raw)[:-1]
    assert all(c["choices"] for c in chunks)
    assert not any("usage" in c for c in chunks)


def test_reasoning_streams_before_the_answer_model_is_called(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """The first reasoning delta reaches the client while the reasoning model is still thinking."""
    upstream.script(REASONER, Reply(reasoning=["first thought", " second", " third"], delay_between=0.4))
    with http.stream("POST", "/v1/chat/completions", json={"model": "duet", "stream": True, "messages": USER}) as response:
        lines = response.iter_lines()
        for line in lines:
            if "reasoning_content" in line:
                break
        assert "first thought" in line
        assert upstream.requests_for(ANSWER) == []  # the answer model has not been asked yet
        assert not upstream.requests_for(REASONER)[0].ended.is_set()
        rest = "\n".join(lines)
    assert "echo: " in rest


def test_answer_only_pipeline(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    upstream.script(ANSWER, Reply(content=["alone"]))
    completion = http.post("/v1/chat/completions", json={"model": "answer-only", "messages": USER}).json()
    assert completion["choices"][0]["message"]["content"] == "alone"
    assert "reasoning_content" not in completion["choices"][0]["message"]
    assert upstream.requests_for(REASONER) == []


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_both_route_prefixes(http: httpx.Client, upstream: ScriptedUpstream, path: str) -> None:
    response = http.post(path, json={"model": "duet", "messages": USER})
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"].startswith("echo: ")


@pytest.mark.parametrize("path", ["/v1/models", "/models"])
def test_models_lists_the_pipelines(http: httpx.Client, path: str) -> None:
    models = http.get(path).json()
    assert models["object"] == "list"
    names = [m["id"] for m in models["data"]]
    assert names[:4] == ["duet", "duet-think", "duet-hidden", "answer-only"]
    assert all(m["object"] == "model" for m in models["data"])


def test_inline_think_tags_from_the_answer_model_become_reasoning(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """A model served without a reasoning parser writes <think> inline: still reasoning, not answer."""
    upstream.script(REASONER, Reply(reasoning=["plan"]))
    upstream.script(ANSWER, Reply(content=["<thi", "nk>checking", " facts</th", "ink>\n\nThe answer."]))
    completion = http.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).json()
    message = completion["choices"][0]["message"]
    assert message["content"] == "The answer."
    # A new source starts a new paragraph, and the answer model's own reasoning says whose it is.
    assert message["reasoning_content"] == "plan\n\n[the answer model's own reasoning]\nchecking facts"


def test_reasoning_field_variant_and_plain_reasoner(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """Servers that call it ``reasoning`` (Ollama, vLLM) work; a reasoner without a thinking field
    contributes its whole reply as reasoning."""
    upstream.script(REASONER, Reply(reasoning=["via ", "reasoning"], reasoning_field="reasoning"))
    first = http.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).json()
    assert first["choices"][0]["message"]["reasoning_content"] == "via reasoning"
    upstream.script(REASONER, Reply(content=["plain ", "thoughts"]))
    second = http.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).json()
    assert second["choices"][0]["message"]["reasoning_content"] == "plain thoughts"


def test_reasoner_call_is_closed_when_thinking_ends(http: httpx.Client, upstream: ScriptedUpstream) -> None:
    """The reasoning model's draft answer is not waited for: the call ends with the thinking."""
    upstream.script(REASONER, Reply(reasoning=["think"], content=["a draft ", "nobody reads"] * 5, delay_between=0.2))
    completion = http.post("/v1/chat/completions", json={"model": "duet", "messages": USER}).json()
    assert completion["choices"][0]["message"]["reasoning_content"] == "think"
    call = upstream.requests_for(REASONER)[0]
    assert call.ended.wait(5) and call.aborted
    assert call.finished_at - call.received_at < 1.0  # not the 2 s the draft would take


def test_held_writes_leave_as_one_write_and_never_for_a_client_that_hung_up() -> None:
    """What a response writes while held goes out in one write when released, or before the
    connection is closed; on the server's own event loop (uvloop), a real connection whose client
    hung up gets nothing, and holding or releasing it is no error."""
    import asyncio
    import types

    import uvloop

    from duet.api.server._server import hold_writes
    from tests.waiting import until

    async def main() -> None:
        accepted: asyncio.Queue[asyncio.Transport] = asyncio.Queue()
        lost: list[asyncio.BaseTransport] = []

        class Accept(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport
                accepted.put_nowait(transport)  # type: ignore[arg-type]

            def connection_lost(self, exc: Exception | None) -> None:
                lost.append(self.transport)

        server = await asyncio.get_running_loop().create_server(Accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        reader, client = await asyncio.open_connection("127.0.0.1", port)
        transport = await asyncio.wait_for(accepted.get(), 5)
        writes: list[bytes] = []
        real_write = transport.write
        cycle = types.SimpleNamespace(transport=types.SimpleNamespace(
            write=lambda data: (writes.append(data), real_write(data)), is_closing=transport.is_closing, close=transport.close))
        hold_writes(cycle, True)
        cycle.transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        cycle.transport.write(b"data: first\n\n")
        assert writes == [] and cycle.transport.is_closing() is False  # held; the rest is the transport's own
        hold_writes(cycle, False)
        assert writes == [b"HTTP/1.1 200 OK\r\n\r\ndata: first\n\n"]  # one write
        assert await asyncio.wait_for(reader.readexactly(len(writes[0])), 5) == writes[0]
        hold_writes(cycle, True)
        cycle.transport.write(b"data: last\n\n")
        cycle.transport.close()  # uvicorn closes a connection that is not kept alive: what was held goes first
        assert writes[-1] == b"data: last\n\n" and await asyncio.wait_for(reader.read(), 5) == b"data: last\n\n"
        client.close()

        _, client = await asyncio.open_connection("127.0.0.1", port)
        transport = await asyncio.wait_for(accepted.get(), 5)
        cycle = types.SimpleNamespace(transport=transport)
        hold_writes(cycle, True)  # a live connection: held
        cycle.transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        client.close()
        transport.close()  # what a hang-up leaves: the socket's file is gone
        await until(lambda: transport in lost, "the hung-up connection is lost")
        hold_writes(cycle, False)  # nothing is written, and nothing raises
        assert cycle.transport is transport
        hold_writes(cycle, True)
        hold_writes(cycle, False)
        server.close()
        await server.wait_closed()

    uvloop.run(main())


def test_the_status_line_and_the_first_events_arrive_together(duet: DuetServer) -> None:
    """The client wakes once for both: the status line is held back until the first events are written."""
    body = b'{"model": "duet", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    for _ in range(5):  # every time, not by luck of timing
        with socket.create_connection(("127.0.0.1", duet.port)) as sock:
            sock.sendall(request)
            sock.settimeout(5)
            first_read = sock.recv(65536)  # returns as soon as the first packet arrives
            assert first_read.startswith(b"HTTP/1.1 200"), first_read[:200]
            assert b'"reasoning_content":"' in first_read, first_read  # the model's first thought
