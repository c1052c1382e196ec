"""The continuation store scales and degrades: a call's cost does not grow with the rounds stored,
expired rounds leave in the background, and a store that is down or hung never fails a request
(the round goes on without its hidden part, one warning per outage, each call bounded)."""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml
from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage

from duet.agents.continuations import Continuation, MemoryContinuationStore, SQLiteContinuationStore
from tests.conftest import ANSWER, DUET, REASONER, ROOT, DuetServer, free_port, sse_events, stop_process, wait_for_port
from tests.scripted_upstream import Reply, ScriptedUpstream
from tests.http.test_service_tools import NOTIFY, QUESTION, answer_from_results, assert_whole_round_restored, follow_up, mixed_round

STORE_TIMEOUT = 0.5
OUTAGE_WARNING = "is unavailable ("
BACK_INFO = "is back after"
CONTINUATION = Continuation(turn=[AssistantMessage(content=[FunctionCall(id="c", name="f", arguments="{}")], source="a"),
                                  FunctionExecutionResultMessage(content=[])], reasoning="why")


# -- cost per call -------------------------------------------------------------------------------------


def fill(path: Path, live: int, expired: int = 0) -> None:
    """Rows written straight into a store's table, as an older Duet left them (no expiry index)."""
    connection = sqlite3.connect(path)
    now = time.time()
    payload = CONTINUATION.model_dump_json()
    with connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS continuations (call_id TEXT PRIMARY KEY, payload TEXT NOT NULL, expires_at REAL NOT NULL)"
        )
        connection.executemany("INSERT INTO continuations VALUES (?, ?, ?)",
                               ((f"live-{i}", payload, now + 3600) for i in range(live)))
        connection.executemany("INSERT INTO continuations VALUES (?, ?, ?)",
                               ((f"expired-{i}", payload, now - 60) for i in range(expired)))
    connection.close()


def count_rows(path: Path, where: str = "1", *args: Any) -> int:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute(f"SELECT count(*) FROM continuations WHERE {where}", args).fetchone()[0]  # test's own SQL
    finally:
        connection.close()


def sqlite_work_per_call(path: Path, rows: int) -> tuple[int, int]:
    """SQLite virtual-machine steps of one put and one get with ``rows`` rounds stored: a measure
    of the work that a loaded machine cannot blur, unlike a wall clock."""

    async def main() -> tuple[int, int]:
        fill(path, rows)
        store = SQLiteContinuationStore(path)
        await store.ping()  # queued behind the startup sweep: the store is idle from here on
        steps = [0]

        def step() -> int:
            steps[0] += 1
            return 0

        store._connection.set_progress_handler(step, 1)
        await store.put([f"new-{rows}"], CONTINUATION)
        put_steps, steps[0] = steps[0], 0
        assert await store.get(["nothing", f"new-{rows}"]) == CONTINUATION
        get_steps = steps[0]
        await store.close()
        return put_steps, get_steps

    return asyncio.run(main())


def test_sqlite_call_cost_does_not_grow_with_stored_rounds(tmp_path: Path) -> None:
    small_put, small_get = sqlite_work_per_call(tmp_path / "small.db", 1_000)
    large_put, large_get = sqlite_work_per_call(tmp_path / "large.db", 100_000)
    # A scan of the table (the old DELETE on every put) would take ~100 times the steps at 100k.
    assert large_put <= small_put * 1.2 + 20, (small_put, large_put)
    assert large_get <= small_get * 1.2 + 20, (small_get, large_get)


def test_memory_store_put_is_constant_time_and_expiry_amortised() -> None:
    async def main() -> None:
        store = MemoryContinuationStore(ttl=0.2)
        for i in range(400_000):  # straight into its table: putting them would be the slow part
            store._entries[f"old-{i}"] = (math.inf, CONTINUATION)
        costs = []
        for i in range(50):
            start = time.perf_counter()
            await store.put([f"new-{i}"], CONTINUATION)
            costs.append(time.perf_counter() - start)
        assert statistics.median(costs) < 0.002  # a copy of 400k entries per put took ~70 ms

        store = MemoryContinuationStore(ttl=0.05)
        for i in range(1_000):
            await store.put([f"a-{i}"], CONTINUATION)
        time.sleep(0.1)  # noqa: ASYNC251 - the subject: the entries' time (TTL 0.05 s) runs out; nothing else runs meanwhile
        assert await store.get(["a-0"]) is None  # expired entries are never handed out
        for i in range(20):  # each put drops at most a bounded number of them
            before = len(store._entries)
            await store.put([f"b-{i}"], CONTINUATION)
            assert before + 1 - len(store._entries) <= MemoryContinuationStore._EXPIRE_PER_PUT
        assert sorted(store._entries) == sorted(f"b-{i}" for i in range(20))  # all expired ones gone after a few puts

    asyncio.run(main())


# -- served -------------------------------------------------------------------------------------------


def serve(upstream: ScriptedUpstream, directory: Path, state_url: str, name: str = "duet") -> DuetServer:
    """A Duet whose pipeline runs a service tool (so mixed rounds leave a hidden part) on ``state_url``."""
    config = directory / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{
        "name": "duet-services", "reasoner": {"base_url": upstream.base_url, "model": REASONER},
        "answer": {"base_url": upstream.base_url, "model": ANSWER},
        "tools": {"functions": ["tests.service_tools_fixtures:lookup_customer"]}}]}))
    return DuetServer(["--config", str(config)], {"DUET_STATE_URL": state_url, "DUET_STORE_TIMEOUT": str(STORE_TIMEOUT)},
                      directory / f"{name}.log")


def ask(server: DuetServer, messages: list[dict[str, Any]], stream: bool = False) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = httpx.post(f"{server.base_url}/v1/chat/completions", timeout=30,
                          json={"model": "duet-services", "messages": messages, "tools": [NOTIFY], "stream": stream})
    return response, time.monotonic() - start


def answer_text(response: httpx.Response) -> str:
    if response.headers["content-type"].startswith("text/event-stream"):
        events = sse_events(response.content)
        assert events[-1] == "[DONE]" and all("error" not in e for e in events[:-1])
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    return response.json()["choices"][0]["message"]["content"]  # type: ignore[no-any-return]


def first_round(server: DuetServer, upstream: ScriptedUpstream) -> dict[str, Any]:
    mixed_round(upstream)
    response, _ = ask(server, QUESTION)
    assert response.status_code == 200
    body = response.json()
    assert [c["function"]["name"] for c in body["choices"][0]["message"]["tool_calls"]] == ["notify_user"]
    return body


def assert_hidden_part_missing(upstream: ScriptedUpstream) -> None:
    """The follow-up went on without the hidden part: the answer model sees only the client's call."""
    messages = upstream.requests_for(ANSWER)[-1].body["messages"]
    assert [c["function"]["name"] for m in messages if m.get("tool_calls") for c in m["tool_calls"]] == ["notify_user"]


def test_large_sqlite_store_is_swept_in_the_background(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    """A store an older Duet filled (60k live, 120k expired rounds, no expiry index): the service
    indexes it, deletes the expired rounds without waiting for a request, keeps the live ones,
    and mixed rounds keep their hidden part all along."""
    path = tmp_path / "state.db"
    fill(path, live=60_000, expired=120_000)
    server = serve(upstream, tmp_path, f"sqlite:///{path}")
    try:
        deadline = time.monotonic() + 30
        while count_rows(path, "expires_at <= ?", time.time()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert count_rows(path, "expires_at <= ?", time.time()) == 0  # no put happened: the sweep did it
        assert count_rows(path) == 60_000
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        plan = " ".join(row[-1] for row in connection.execute("EXPLAIN QUERY PLAN DELETE FROM continuations WHERE expires_at <= 0"))
        connection.close()
        assert "USING" in plan and "INDEX" in plan  # expiry is found through an index, not by a scan

        first = first_round(server, upstream)
        upstream.script(ANSWER, answer_from_results)
        second, _ = ask(server, follow_up(first))
        assert second.status_code == 200
        assert_whole_round_restored(upstream.requests_for(ANSWER)[-1].body)
        assert count_rows(path, "call_id NOT LIKE ?", "%:note:%") == 60_001  # the round (beside its turn's reasoning note)
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A Redis of this test's own, which the test may kill and start again on the same port."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required (the README's test command installs it)"
    port = free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    state: dict[str, Any] = {"url": f"redis://127.0.0.1:{port}/0", "port": port}

    def start() -> None:
        state["process"] = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        wait_for_port(port)

    state["start"] = start
    start()
    yield state
    if state["process"].poll() is None:
        stop_process(state["process"])


def test_redis_outage_degrades_rounds_and_recovers(upstream: ScriptedUpstream, redis_server: dict[str, Any], tmp_path: Path) -> None:
    import redis

    server = serve(upstream, tmp_path, redis_server["url"])
    try:
        first = first_round(server, upstream)
        call_id = first["choices"][0]["message"]["tool_calls"][0]["id"]
        assert redis.Redis.from_url(redis_server["url"]).exists(f"duet:continuation:duet-services:{call_id}")

        redis_server["process"].kill()  # by its PID, mid-run
        redis_server["process"].wait(10)
        upstream.script(ANSWER, answer_from_results)
        response, _ = ask(server, follow_up(first))  # its saved part is out of reach
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "Results: notified"
        assert_hidden_part_missing(upstream)
        for stream in (False, True, False, True):  # rounds that cannot be saved, and their follow-ups
            later = first_round(server, upstream)
            upstream.script(ANSWER, answer_from_results)
            response, _ = ask(server, follow_up(later), stream=stream)
            assert response.status_code == 200 and answer_text(response) == "Results: notified"
            assert_hidden_part_missing(upstream)
        log = server.log.read_text()
        assert log.count(OUTAGE_WARNING) == 1, log  # one warning for the whole outage
        assert "Traceback" not in log and BACK_INFO not in log

        redis_server["start"]()  # back, on the same port
        client = redis.Redis.from_url(redis_server["url"])
        deadline = time.monotonic() + 15
        while True:  # the store is tried again within a second; the first round saved after that keeps its part
            again = first_round(server, upstream)
            if client.exists(f"duet:continuation:duet-services:{again['choices'][0]['message']['tool_calls'][0]['id']}"):
                break
            assert time.monotonic() < deadline, "state is not kept again after Redis came back"
            time.sleep(0.3)
        upstream.script(ANSWER, answer_from_results)
        response, _ = ask(server, follow_up(again))
        assert response.status_code == 200
        assert_whole_round_restored(upstream.requests_for(ANSWER)[-1].body)
        log = server.log.read_text()
        assert log.count(BACK_INFO) == 1 and log.count(OUTAGE_WARNING) == 1 and "Traceback" not in log, log
    finally:
        server.stop()


@pytest.fixture
def hung_redis() -> Iterator[str]:
    """A loopback TCP server that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stopped = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stopped.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    stopped.set()
    thread.join(5)
    for connection in held:
        connection.close()
    listener.close()


def test_hung_redis_costs_a_request_at_most_the_store_timeout(upstream: ScriptedUpstream, hung_redis: str, tmp_path: Path) -> None:
    server = serve(upstream, tmp_path, hung_redis)
    bound = STORE_TIMEOUT + 1.5  # the store's share, plus a scripted round on a busy machine
    try:
        mixed_round(upstream)
        response, elapsed = ask(server, QUESTION)  # its save hangs
        assert response.status_code == 200 and response.json()["choices"][0]["finish_reason"] == "tool_calls"
        assert elapsed < bound, elapsed
        first = response.json()

        def follow() -> tuple[httpx.Response, float]:
            return ask(server, follow_up(first))

        upstream.script(ANSWER, *[answer_from_results] * 8)
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: follow(), range(8)))  # their reads hang, all at once
        assert all(r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Results: notified" for r, _ in results)
        assert max(e for _, e in results) < bound and time.monotonic() - start < bound + 1.0, [e for _, e in results]
        log = server.log.read_text()
        assert log.count(OUTAGE_WARNING) == 1 and "no answer within" in log and "Traceback" not in log, log
    finally:
        server.stop()


@pytest.mark.parametrize("where", ["under-a-file", "a-directory"])
def test_unwritable_sqlite_path_stops_startup_naming_it(tmp_path: Path, where: str) -> None:
    if where == "under-a-file":
        (tmp_path / "plain-file").write_text("not a directory")
        path = tmp_path / "plain-file" / "state.db"
    else:
        path = tmp_path  # a directory is no database file
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    env |= {"DUET_STATE_URL": f"sqlite:///{path}", "DUET_PORT": str(free_port())}
    done = subprocess.run([DUET, "serve"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("duet: cannot start: ") and str(path) in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_ping_tells_a_reachable_store_from_a_down_or_hung_one(redis_server: dict[str, Any], hung_redis: str, tmp_path: Path) -> None:
    """What readiness checks call: it answers for a working store, and raises within the store
    timeout for one that refuses connections or never answers."""
    from duet.agents.continuations import StoreUnavailable, open_store

    async def main() -> None:
        for url in (f"sqlite:///{tmp_path}/state.db", redis_server["url"]):
            store = open_store(url, timeout=STORE_TIMEOUT)
            await store.ping()
            await store.close()
        for url in (f"redis://127.0.0.1:{free_port()}/0", hung_redis):
            store = open_store(url, timeout=STORE_TIMEOUT)
            start = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await store.ping()
            assert time.monotonic() - start < STORE_TIMEOUT + 0.5
            await store.close()

    asyncio.run(main())


# -- a store passed in from Python -----------------------------------------------------------------------


class BrokenStore(MemoryContinuationStore):
    """A store of the caller's own, as the Python API accepts: every read fails, or never answers."""

    def __init__(self, hang: bool) -> None:
        super().__init__()
        self.hang = hang
        self.reads = 0

    async def get(self, call_ids: Any) -> Continuation | None:
        self.reads += 1
        if self.hang:
            await asyncio.Event().wait()
        raise ConnectionError("the caller's store is down")


@pytest.mark.parametrize("hang", [False, True], ids=["failing", "hung"])
def test_duet_guards_a_store_passed_in_from_python(upstream: ScriptedUpstream, hang: bool, caplog: pytest.LogCaptureFixture) -> None:
    """``Duet`` wraps any store it is given in the one guard: a hung read is cut at the store timeout
    and a failing store is reported once per outage, and the follow-ups are answered all the same."""
    from duet.agents import AnswerSettings, Duet, PipelineSettings, ReasonerSettings
    from duet.agents.continuations import DEFAULT_STORE_TIMEOUT, GuardedStore

    call = {"id": "call_" + "0" * 24, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "tool_call_id": call["id"], "content": "r"}]
    store = BrokenStore(hang)
    settings = PipelineSettings(reasoner=ReasonerSettings(base_url=upstream.base_url, model=REASONER),
                                answer=AnswerSettings(base_url=upstream.base_url, model=ANSWER))

    async def main() -> list[str]:
        async with Duet.from_settings(settings, continuations=store) as duet:
            answers = [(await duet.run(messages)).content for _ in range(2)]
            assert isinstance(duet.continuations, GuardedStore) and duet.continuations.store is store
            return answers

    upstream.script(ANSWER, *[Reply(content=["answered"])] * 2)
    start = time.monotonic()
    assert asyncio.run(asyncio.wait_for(main(), 3 * DEFAULT_STORE_TIMEOUT)) == ["answered", "answered"]
    assert time.monotonic() - start < 2 * DEFAULT_STORE_TIMEOUT  # the second read fails at once: the store is out
    assert store.reads == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum(OUTAGE_WARNING in w for w in warnings) == 1, warnings
