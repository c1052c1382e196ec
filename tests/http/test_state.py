"""Stored state belongs to the API key that made it, and nothing is lost silently when the store fails.

Over real HTTP on 127.0.0.1 with two API keys: a Responses API response, its items and the hidden
part of a client tool round (chat, messages) stored with one key answer the other key exactly as
unknown ids do (same status, same body, same headers, no model call), on SQLite, on Redis and across
two replicas sharing Redis; ``state_scope: shared`` shares them. With the store down, a response that
could not be stored says ``store: false`` (body, last stream event, ``Duet-Unsaved`` header), to the
``openai`` SDK and the Agents SDK alike; ``store_outage: refuse`` answers 503 before any model call.
With a real Redis (append-only, fsync always) killed by its PID between the turns of 20
conversations and while 20 streams run, every response is either stored (its follow-up works) or
says it is not. Every process is started and stopped by its PID; every wait has a bound.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest
import yaml

from tests.conftest import ANSWER, REASONER, ROOT, DuetServer, free_port, stop_process, wait_for_port
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.http.test_responses import sse
from tests.http.test_service_tools import NOTIFY, QUESTION, answer_from_results, assert_whole_round_restored, follow_up, mixed_round

KEY_A = "state-test-key-alpha-5b1f0c27"
KEY_B = "state-test-key-bravo-93d7e2a4"
PIPELINE = "duet"  # the name tests/agents_sdk_client.py asks for
NOTIFY_ANTHROPIC = {"name": "notify_user", "description": NOTIFY["function"]["description"], "input_schema": NOTIFY["function"]["parameters"]}
NOTIFY_RESPONSES = {"type": "function", **{k: NOTIFY["function"][k] for k in ("name", "description", "parameters")}}
UNCOMPARED_HEADERS = {"date", "x-request-id"}


# -- servers and stores ----------------------------------------------------------------------------


@dataclass
class RedisProcess:
    """A ``redis-server`` of the test's own, killed (SIGKILL, by its PID) and started again on the
    same port and directory. ``durable``: append-only file, fsync on every write, so what Redis
    acknowledged survives the kill."""

    directory: Path
    durable: bool = False
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None  # type: ignore[type-arg]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is required (the README's test command installs it)"
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        self.process = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *persistence,
                                         "--dir", str(self.directory)], stdout=subprocess.DEVNULL)
        wait_for_port(self.port)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_process(self.process)


def started_redis(directory: Path, durable: bool = False) -> RedisProcess:
    redis = RedisProcess(directory, durable)
    redis.start()
    return redis


def serve(upstream: ScriptedUpstream, directory: Path, state_url: str, name: str = "duet", **env: str) -> DuetServer:
    """A Duet with keys A and B, whose pipeline runs a service tool (mixed rounds leave a hidden part)."""
    config = directory / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{
        "name": PIPELINE, "reasoner": {"base_url": upstream.base_url, "model": REASONER},
        "answer": {"base_url": upstream.base_url, "model": ANSWER},
        "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}}]}))
    return DuetServer(["--config", str(config)], {"DUET_API_KEYS": f"{KEY_A},{KEY_B}", "DUET_STATE_URL": state_url,
                                                  "DUET_STORE_TIMEOUT": "0.5", **env}, directory / f"{name}.log")


def post(server: DuetServer, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"x-api-key": key} if path.startswith("/v1/messages") else {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=30)


def get(server: DuetServer, key: str, path: str) -> httpx.Response:
    return httpx.get(f"{server.base_url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=30)


def wait_for_store(server: DuetServer, timeout: float = 20) -> None:
    """Until the server's readiness check finds its store answering (each check is also the store's
    guard's retry: a store that is back is used again from then on)."""
    deadline = time.monotonic() + timeout
    while server.health()["checks"]["state_store"] != "ok":
        assert time.monotonic() < deadline, f"the store is not back: {server.health()}"
        time.sleep(0.1)


# -- A. stored state belongs to the key that made it ---------------------------------------------------


def assert_same_as_unknown(asked: httpx.Response, asked_id: str, unknown: httpx.Response, unknown_id: str) -> None:
    """The answer to another key's id is the answer to an unknown id: status, headers, body."""
    assert asked.status_code == unknown.status_code == 404, asked.text
    assert asked.text.replace(asked_id, "<id>") == unknown.text.replace(unknown_id, "<id>")
    assert ({k: v for k, v in asked.headers.items() if k not in UNCOMPARED_HEADERS}
            == {k: v for k, v in unknown.headers.items() if k not in UNCOMPARED_HEADERS})


def assert_responses_belong_to_their_key(upstream: ScriptedUpstream, made_on: DuetServer, asked_on: DuetServer) -> None:
    """Key A's response, made on one server, read and continued on another (or the same): key B gets
    404s word for word those of unknown ids, and no model call; key A reads and continues it."""
    upstream.script(ANSWER, Reply(content=["Bring sandwiches."]))
    made = post(made_on, KEY_A, "/v1/responses", {"model": PIPELINE, "input": "What should I pack for a picnic?"})
    assert made.status_code == 200 and made.json()["store"] is True and "duet-unsaved" not in made.headers
    response_id = made.json()["id"]
    message_id = next(item["id"] for item in made.json()["output"] if item["type"] == "message")
    unknown_response, unknown_item = f"resp_{secrets.token_hex(16)}", f"msg_{secrets.token_hex(16)}"
    calls = len(upstream.requests)

    assert_same_as_unknown(get(asked_on, KEY_B, f"/v1/responses/{response_id}"), response_id,
                           get(asked_on, KEY_B, f"/v1/responses/{unknown_response}"), unknown_response)
    for stream in (False, True):
        def continued(previous: str) -> httpx.Response:
            return post(asked_on, KEY_B, "/v1/responses", {"model": PIPELINE, "stream": stream, "previous_response_id": previous,
                                                           "input": "and then?"})
        assert_same_as_unknown(continued(response_id), response_id, continued(unknown_response), unknown_response)

    def referenced(item_id: str) -> httpx.Response:
        return post(asked_on, KEY_B, "/v1/responses", {"model": PIPELINE, "input": [{"type": "item_reference", "id": item_id}]})
    assert_same_as_unknown(referenced(message_id), message_id, referenced(unknown_item), unknown_item)
    assert len(upstream.requests) == calls  # none of them reached a model

    assert get(asked_on, KEY_A, f"/v1/responses/{response_id}").json()["id"] == response_id
    for body in ({"previous_response_id": response_id, "input": "and then?"},
                 {"input": [{"type": "item_reference", "id": message_id}, {"role": "user", "content": "and then?"}]}):
        upstream.script(ANSWER, Reply(content=["A blanket."]))
        continued = post(asked_on, KEY_A, "/v1/responses", {"model": PIPELINE, **body})
        assert continued.status_code == 200, continued.text
        seen = json.dumps(upstream.requests_for(ANSWER)[-1].body["messages"])
        assert "Bring sandwiches." in seen  # the stored conversation was put back


def assert_hidden_part_missing(upstream: ScriptedUpstream) -> None:
    """The follow-up went on without the hidden part: the answer model sees only the client's call."""
    messages = upstream.requests_for(ANSWER)[-1].body["messages"]
    assert [c["function"]["name"] for m in messages if m.get("tool_calls") for c in m["tool_calls"]] == ["notify_user"]


def chat_round(upstream: ScriptedUpstream, server: DuetServer, key: str) -> httpx.Response:
    mixed_round(upstream)
    return post(server, key, "/v1/chat/completions", {"model": PIPELINE, "messages": QUESTION, "tools": [NOTIFY]})


def messages_round(upstream: ScriptedUpstream, server: DuetServer, key: str) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """A mixed round over ``/v1/messages``, and the history its follow-up sends back."""
    mixed_round(upstream)
    question = [{"role": "user", "content": QUESTION[0]["content"]}]
    first = post(server, key, "/v1/messages", {"model": PIPELINE, "max_tokens": 256, "messages": question, "tools": [NOTIFY_ANTHROPIC]})
    assert first.status_code == 200, first.text
    [tool_use] = [block for block in first.json()["content"] if block["type"] == "tool_use"]
    return first, [*question, {"role": "assistant", "content": first.json()["content"]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "notified"}]}]


def assert_tool_rounds_belong_to_their_key(upstream: ScriptedUpstream, made_on: DuetServer, asked_on: DuetServer) -> None:
    """Key A's mixed rounds (chat, messages): followed up by key B with A's call ids, they go on
    without the hidden part, as rounds of unknown ids do; followed up by key A, it is put back."""
    first = chat_round(upstream, made_on, KEY_A)
    assert first.status_code == 200 and "duet-unsaved" not in first.headers
    for key, restored in ((KEY_B, False), (KEY_A, True)):
        upstream.script(ANSWER, answer_from_results)
        second = post(asked_on, key, "/v1/chat/completions", {"model": PIPELINE, "messages": follow_up(first.json()), "tools": [NOTIFY]})
        assert second.status_code == 200, second.text
        if restored:
            assert_whole_round_restored(upstream.requests_for(ANSWER)[-1].body)
        else:
            assert second.json()["choices"][0]["message"]["content"] == "Results: notified"
            assert_hidden_part_missing(upstream)

    _, history = messages_round(upstream, made_on, KEY_A)
    for key, restored in ((KEY_B, False), (KEY_A, True)):
        upstream.script(ANSWER, answer_from_results)
        second = post(asked_on, key, "/v1/messages", {"model": PIPELINE, "max_tokens": 256, "messages": history, "tools": [NOTIFY_ANTHROPIC]})
        assert second.status_code == 200, second.text
        if restored:
            assert_whole_round_restored(upstream.requests_for(ANSWER)[-1].body)
        else:
            assert_hidden_part_missing(upstream)


@dataclass
class Deployment:
    servers: list[DuetServer]
    redis: RedisProcess | None
    directory: Path

    def assert_no_key_in_the_store(self) -> None:
        """Neither key appears in what the store holds; every entry is under an owner id."""
        if self.redis is not None:
            import redis

            client = redis.Redis.from_url(self.redis.url)
            keys = [key.decode() for key in client.scan_iter("*")]
            assert keys and all(re.match(r"duet:continuation:key-[0-9a-f]{32}/", key) for key in keys), keys
            held = b" ".join(client.get(key) or b"" for key in keys) + " ".join(keys).encode()
        else:
            held = b"".join(path.read_bytes() for path in self.directory.glob("state.db*"))
            assert b"key-" in held
        assert KEY_A.encode() not in held and KEY_B.encode() not in held


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def keyed(request: pytest.FixtureRequest, upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One server with keys A and B, its state in SQLite or in Redis."""
    directory = tmp_path_factory.mktemp(f"keyed-{request.param}")
    redis = started_redis(directory) if request.param == "redis" else None
    try:
        server = serve(upstream, directory, redis.url if redis else f"sqlite:///{directory}/state.db")
        yield Deployment([server], redis, directory)
        server.stop()
    finally:
        if redis is not None:
            redis.stop()


def test_responses_of_one_key_are_unknown_to_another(keyed: Deployment, upstream: ScriptedUpstream) -> None:
    [server] = keyed.servers
    assert_responses_belong_to_their_key(upstream, server, server)


def test_tool_rounds_of_one_key_are_not_continued_by_another(keyed: Deployment, upstream: ScriptedUpstream) -> None:
    [server] = keyed.servers
    assert_tool_rounds_belong_to_their_key(upstream, server, server)
    keyed.assert_no_key_in_the_store()


def test_replicas_sharing_redis_derive_the_same_owner(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """Two replicas, one Redis: what key A stored on one, key A continues on the other and key B does not."""
    redis = started_redis(tmp_path)
    replicas: list[DuetServer] = []
    try:
        with ThreadPoolExecutor(2) as pool:  # each start imports the whole service: start both at once
            replicas = list(pool.map(lambda i: serve(upstream, tmp_path, redis.url, f"replica-{i}"), range(2)))
        assert_responses_belong_to_their_key(upstream, replicas[0], replicas[1])
        assert_tool_rounds_belong_to_their_key(upstream, replicas[0], replicas[1])
        Deployment(replicas, redis, tmp_path).assert_no_key_in_the_store()
    finally:
        for replica in replicas:
            replica.stop()
        redis.stop()


def test_shared_state_scope_lets_every_key_continue(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = serve(upstream, tmp_path, f"sqlite:///{tmp_path}/state.db", DUET_STATE_SCOPE="shared")
    try:
        made = post(server, KEY_A, "/v1/responses", {"model": PIPELINE, "input": "What should I pack?"})
        response_id = made.json()["id"]
        assert get(server, KEY_B, f"/v1/responses/{response_id}").json()["id"] == response_id
        continued = post(server, KEY_B, "/v1/responses", {"model": PIPELINE, "previous_response_id": response_id, "input": "and?"})
        assert continued.status_code == 200, continued.text
        first = chat_round(upstream, server, KEY_A)
        upstream.script(ANSWER, answer_from_results)
        assert post(server, KEY_B, "/v1/chat/completions", {"model": PIPELINE, "messages": follow_up(first.json()),
                                                            "tools": [NOTIFY]}).status_code == 200
        assert_whole_round_restored(upstream.requests_for(ANSWER)[-1].body)
    finally:
        server.stop()


# -- B. no silent loss ---------------------------------------------------------------------------------


def sdk(server: DuetServer, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=KEY_A, max_retries=retries)


@pytest.fixture(scope="module")
def store_down(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """A server whose store is down from the start: nothing listens at its Redis URL."""
    directory = tmp_path_factory.mktemp("store-down")
    server = serve(upstream, directory, f"redis://127.0.0.1:{free_port()}/0")
    yield server
    server.stop()


def test_a_response_that_could_not_be_stored_says_so(store_down: DuetServer, upstream: ScriptedUpstream) -> None:
    client = sdk(store_down)
    upstream.script(ANSWER, Reply(content=["Bring sandwiches."]))
    raw = client.responses.with_raw_response.create(model=PIPELINE, input="What should I pack?")
    response = raw.parse()
    assert response.store is False and response.output_text == "Bring sandwiches." and raw.headers["duet-unsaved"] == "response"

    upstream.script(ANSWER, Reply(content=["Bring sandwiches."]))
    with client.responses.stream(model=PIPELINE, input="What should I pack?") as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_response()
    assert kinds[-1] == "response.completed" and streamed.store is False and streamed.output_text == "Bring sandwiches."

    for previous in (response.id, streamed.id):  # their next turn cannot be served while the store is down: retryable
        with pytest.raises(openai.APIStatusError) as raised:
            client.responses.create(model=PIPELINE, previous_response_id=previous, input="and then?")
        assert raised.value.status_code == 503 and raised.value.body["code"] == "store_unavailable"  # type: ignore[index]

    unstored = post(store_down, KEY_A, "/v1/responses", {"model": PIPELINE, "input": "hi", "store": False})
    assert unstored.json()["store"] is False and "duet-unsaved" not in unstored.headers  # nothing was asked to be kept

    mixed_round(upstream)  # a Responses tool round: neither the response nor the hidden part could be kept
    both = post(store_down, KEY_A, "/v1/responses", {"model": PIPELINE, "input": QUESTION[0]["content"], "tools": [NOTIFY_RESPONSES]})
    assert both.json()["store"] is False and set(both.headers["duet-unsaved"].split(", ")) == {"response", "tool_round"}

    first = chat_round(upstream, store_down, KEY_A)
    assert first.status_code == 200 and first.headers["duet-unsaved"] == "tool_round"
    upstream.script(ANSWER, answer_from_results)
    second = post(store_down, KEY_A, "/v1/chat/completions", {"model": PIPELINE, "messages": follow_up(first.json()), "tools": [NOTIFY]})
    assert second.status_code == 200 and "duet-unsaved" not in second.headers  # goes on without the hidden part
    assert_hidden_part_missing(upstream)
    message, _ = messages_round(upstream, store_down, KEY_A)
    assert message.headers["duet-unsaved"] == "tool_round"

    log = store_down.log.read_text()
    assert f"response {response.id} was answered but not stored" in log and "Traceback" not in log


@pytest.mark.parametrize("mode", ["run", "streamed"])
def test_the_agents_sdk_takes_responses_that_could_not_be_stored(store_down: DuetServer, upstream: ScriptedUpstream,
                                                                 mode: str, tmp_path: Path) -> None:
    from tests.http.test_responses import script_call

    script_call(upstream)
    upstream.script(ANSWER, Reply(content=["It is ", "sunny in Paris."]))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "agents_sdk_client.py"), f"{store_down.base_url}/v1", KEY_A, mode],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["final"] == "It is sunny in Paris." and result["calls"] == ["Paris"]


def logged(server: DuetServer, line: str, times: int, timeout: float = 10) -> bool:
    """Whether the server's log holds ``line`` exactly ``times`` times, once it has written that many (or
    after ``timeout`` seconds): a request's log line follows its answer, so it is waited for, not raced."""
    deadline = time.monotonic() + timeout
    count = server.log.read_text().count(line)
    while count < times and time.monotonic() < deadline:
        time.sleep(0.02)
        count = server.log.read_text().count(line)
    return count == times


def test_store_outage_refuse_answers_503_before_any_model_call(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    server = serve(upstream, tmp_path, f"redis://127.0.0.1:{free_port()}/0", DUET_STORE_OUTAGE="refuse")
    try:
        # Nothing has told the store's guard of the outage yet: answered, and its failed store call tells it.
        first = post(server, KEY_A, "/v1/responses", {"model": PIPELINE, "input": "hi"})
        assert first.status_code == 200 and first.json()["store"] is False
        calls = len(upstream.requests)
        for stream in (False, True):
            refused = post(server, KEY_A, "/v1/responses", {"model": PIPELINE, "input": "hi", "stream": stream})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
            assert refused.json()["error"]["code"] == "store_unavailable"
        refused_lines = "POST /v1/responses status=503"
        assert logged(server, refused_lines, 2)  # the request's log line is written as its answer ends: waited for
        with pytest.raises(openai.InternalServerError):
            sdk(server, retries=1).responses.create(model=PIPELINE, input="hi")  # retried after Retry-After, refused again
        assert logged(server, refused_lines, 4)
        assert len(upstream.requests) == calls  # none of them reached a model
        assert post(server, KEY_A, "/v1/responses", {"model": PIPELINE, "input": "hi", "store": False}).status_code == 200
        assert chat_round(upstream, server, KEY_A).headers["duet-unsaved"] == "tool_round"  # a tool round never asks to store
    finally:
        server.stop()


@dataclass
class Turn:
    """A conversation's first turn: its response id, and what it said of being stored."""

    response_id: str
    stored: bool


def first_turn(server: DuetServer, stream: bool) -> Turn:
    """One first turn; a collected one carries ``Duet-Unsaved: response`` exactly when it says ``store: false``."""
    response = post(server, KEY_A, "/v1/responses", {"model": PIPELINE, "input": "What should I pack?", "stream": stream})
    assert response.status_code == 200, response.text
    return read_turn(response)


def read_turn(response: httpx.Response) -> Turn:
    if response.headers["content-type"].startswith("text/event-stream"):
        final = sse(response.content)[-1]
        assert final["type"] == "response.completed", final
        return Turn(final["response"]["id"], final["response"]["store"])
    body = response.json()
    assert (response.headers.get("duet-unsaved") == "response") == (body["store"] is False), (response.headers, body["store"])
    return Turn(body["id"], body["store"])


@dataclass
class Losses:
    stored: int = 0  # said store: true, and the next turn was answered
    said_unsaved: int = 0  # said store: false, and the next turn's 404 said it was not stored
    said_unsaved_but_kept: int = 0  # said store: false, yet Redis had applied the write (its reply was lost in the kill)
    silent: list[str] = field(default_factory=list)  # said store: true, and the next turn did not find it


def next_turns(server: DuetServer, turns: list[Turn]) -> Losses:
    losses = Losses()
    for turn in turns:
        follow = post(server, KEY_A, "/v1/responses", {"model": PIPELINE, "previous_response_id": turn.response_id, "input": "and then?"})
        if follow.status_code == 200:
            if turn.stored:
                losses.stored += 1
            else:
                losses.said_unsaved_but_kept += 1
        elif turn.stored:
            losses.silent.append(f"{turn.response_id}: {follow.status_code} {follow.text}")
        else:
            error = follow.json()["error"]
            assert follow.status_code == 404 and error["code"] == "previous_response_not_found", follow.text
            assert "was not stored: the response store was unavailable" in error["message"], error
            losses.said_unsaved += 1
    return losses


def test_redis_killed_between_turns_loses_nothing_silently(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """20 conversations begun before Redis is killed (by its PID), 20 while it is down: each first
    turn says whether it was stored, and after Redis is back each next turn agrees."""
    redis = started_redis(tmp_path, durable=True)
    server = serve(upstream, tmp_path, redis.url)
    try:
        before = [first_turn(server, stream=i % 2 == 1) for i in range(20)]
        kept_round = chat_round(upstream, server, KEY_A)
        assert all(turn.stored for turn in before) and "duet-unsaved" not in kept_round.headers
        redis.kill()
        during = [first_turn(server, stream=i % 2 == 1) for i in range(20)]
        assert not any(turn.stored for turn in during)
        assert chat_round(upstream, server, KEY_A).headers["duet-unsaved"] == "tool_round"
        waiting = post(server, KEY_A, "/v1/responses", {"model": PIPELINE, "previous_response_id": before[0].response_id, "input": "?"})
        assert waiting.status_code == 503 and waiting.json()["error"]["code"] == "store_unavailable"  # retryable, not a 404

        redis.start()
        wait_for_store(server)
        losses = next_turns(server, before + during)
        assert losses == Losses(stored=20, said_unsaved=20), losses
        upstream.script(ANSWER, answer_from_results)
        restored = post(server, KEY_A, "/v1/chat/completions", {"model": PIPELINE, "messages": follow_up(kept_round.json()), "tools": [NOTIFY]})
        assert restored.status_code == 200
        assert_whole_round_restored(upstream.requests_for(ANSWER)[-1].body)  # kept before the kill, found after it
        assert "Traceback" not in server.log.read_text()
    finally:
        server.stop()
        redis.stop()


def wait_until(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_redis_killed_while_streams_run_loses_nothing_silently(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """20 streams run, their answers held upstream; 10 are let through and end; the other 10 are let
    through, and Redis is killed (by its PID) as soon as the first of them has ended. Every stream's
    last event says whether it was stored, and after Redis is back each next turn agrees."""
    redis = started_redis(tmp_path, durable=True)
    server = serve(upstream, tmp_path, redis.url)
    first_half, second_half = threading.Event(), threading.Event()
    upstream.script(ANSWER, *[Reply(content=["Packed."], hold=first_half)] * 10, *[Reply(content=["Packed."], hold=second_half)] * 10)
    ended = threading.Semaphore(0)

    def converse(index: int) -> Turn:
        try:
            with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=60) as client:
                with client.stream("POST", "/v1/responses", json={"model": PIPELINE, "input": f"Pack {index}", "stream": True}) as response:
                    response.read()
            return read_turn(response)
        finally:
            ended.release()

    try:
        with ThreadPoolExecutor(20) as pool:
            futures = [pool.submit(converse, index) for index in range(20)]
            wait_until(lambda: len(upstream.requests_for(ANSWER)) == 20)  # every stream runs, its answer held
            first_half.set()
            for _ in range(10):
                assert ended.acquire(timeout=30)
            second_half.set()
            assert ended.acquire(timeout=30)
            redis.kill()  # as soon as one more has ended: while the other 9 finish and store
            turns = [future.result(timeout=60) for future in futures]
        redis.start()
        wait_for_store(server)
        losses = next_turns(server, turns)
        assert losses.silent == [] and losses.stored >= 11, losses
        assert losses.stored + losses.said_unsaved + losses.said_unsaved_but_kept == 20
        print(f"streams: {losses}")
        assert "Traceback" not in server.log.read_text()
    finally:
        first_half.set()
        second_half.set()
        server.stop()
        redis.stop()


# -- the owner, without HTTP ---------------------------------------------------------------------------


def test_owner_ids_are_stable_distinct_and_do_not_hold_the_key() -> None:
    from duet.agents.continuations import DEFAULT_OWNER, owned
    from duet.api._auth import owner_id

    a, b = owner_id(KEY_A), owner_id(KEY_B)
    assert a == owner_id(KEY_A) and a != b and re.fullmatch(r"key-[0-9a-f]{32}", a)
    assert KEY_A not in a and owned(a, "duet:call_1") == f"{a}/duet:call_1"
    assert owned(DEFAULT_OWNER, "duet:call_1") == "duet:call_1"  # as written before state was scoped to keys


def test_a_python_run_says_when_the_hidden_part_could_not_be_kept(upstream: ScriptedUpstream) -> None:
    """``Duet.run`` from Python (the default owner): ``DuetResult.hidden_part_lost`` tells a round whose
    hidden part the store could not keep."""
    import asyncio

    from duet.agents import AnswerSettings, Duet, PipelineSettings, ReasonerSettings
    from duet.agents.continuations import Continuation, MemoryContinuationStore
    from duet.workbenches import ToolsSettings

    class FailingPuts(MemoryContinuationStore):
        async def put(self, call_ids: Any, continuation: Continuation) -> None:
            raise ConnectionError("the caller's store is down")

    settings = PipelineSettings(reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
                                answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER),
                                tools=ToolsSettings(functions=["tests.service_tools_fixtures:lookup_customer"]))  # type: ignore[list-item]

    async def main(store: MemoryContinuationStore) -> tuple[str, bool]:
        async with Duet.from_settings(settings, continuations=store) as duet:
            mixed_round(upstream)
            result = await duet.run(QUESTION, tools=[NOTIFY])
            return result.finish_reason, result.hidden_part_lost

    assert asyncio.run(main(MemoryContinuationStore())) == ("tool_calls", False)
    assert asyncio.run(main(FailingPuts())) == ("tool_calls", True)
