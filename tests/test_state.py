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

from tests.conftest import ANSWER, REASONER, DuetServer, free_port, stop_process, wait_for_port
from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
from tests.test_responses import sse
from tests.test_service_tools import NOTIFY, QUESTION, answer_from_results, assert_whole_round_restored, follow_up, mixed_round

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
