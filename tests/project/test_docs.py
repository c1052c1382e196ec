"""The docs hold: the manual builds with mkdocs in strict mode (no broken link, anchor or page left
out), README.md stays page one (short, the two commands first), and its examples show what Duet
returns (they run against ``duet serve`` on the scripted models of ``tests/readme_upstream.py``)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.conftest import ROOT, DuetServer, sse_events
from tests.readme_upstream import weather
from tests.scripted_upstream import ScriptedUpstream

README = ROOT / "README.md"
README_LINES = 150
CALL_ID = re.compile(r"call_[0-9a-f]+")
REQUEST_TIMEOUT = 120.0  # generous: on a loaded machine (the whole suite beside other work) a call may wait its turn


def code_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown text: (language, body)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def test_the_manual_builds_in_strict_mode(tmp_path: Path) -> None:
    """Every warning (a broken link or anchor, a page missing from the navigation) fails the build."""
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                            "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert build.returncode == 0 and "WARNING" not in build.stderr, build.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_the_readme_is_page_one() -> None:
    """At most 150 lines, and its first commands are the project's two: serve, then test (CI runs it)."""
    text = README.read_text()
    assert len(text.splitlines()) <= README_LINES
    language, first = code_blocks(text)[0]
    commands = [line.split("#")[0].strip() for line in first.splitlines() if line.split("#")[0].strip()]
    assert (language, commands) == ("sh", ["make serve", "make test"])
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.fixture(scope="module")
def readme_duet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuetServer]:
    """``duet serve`` on the README's scripted models, no API keys (as the README's calls assume)."""
    directory = tmp_path_factory.mktemp("readme")
    with ScriptedUpstream(responder=weather) as upstream:
        server = DuetServer([], {"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": "deepseek-r1",
                                 "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": "qwen2.5", "DUET_API_KEYS": ""},
                            directory / "duet.log")
        try:
            yield server
        finally:
            server.stop()


def shown_choices(output: str) -> list[Any]:
    """The ``choices`` of each event a README output block shows (``{…,`` stands for the fixed fields)."""
    shown: list[Any] = []
    for line in output.splitlines():
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            shown.append(data)
            continue
        shown.append(json.loads("{" + data.removeprefix("{…,") if data.startswith("{…,") else data)["choices"])
    return shown


TEXT_DELTAS = ("reasoning_content", "content")


def text_merged(events: list[Any]) -> list[Any]:
    """``choices`` of stream events, with consecutive text deltas of one kind joined: where a stream
    cuts its text depends on how the upstream's chunks happen to arrive (a loaded machine reads two at
    once, and Duet sends what it has), not on what Duet streams."""
    merged: list[Any] = []
    for choices in events:
        delta = choices[0]["delta"] if choices != "[DONE]" and len(choices) == 1 else None
        kind = next(iter(delta)) if delta is not None and len(delta) == 1 and next(iter(delta)) in TEXT_DELTAS else None
        previous = merged[-1][0]["delta"] if kind and merged and merged[-1] != "[DONE]" else None
        if (kind and previous is not None and set(previous) == {kind} and merged[-1][0]["finish_reason"] is None
                and choices[0]["finish_reason"] is None):
            previous[kind] += delta[kind]  # type: ignore[index]
        else:
            merged.append(json.loads(json.dumps(choices)))
    return merged


def test_the_readme_curl_shows_what_duet_streams(readme_duet: DuetServer) -> None:
    blocks = code_blocks(README.read_text())
    command = next(body for language, body in blocks if language == "sh" and body.startswith("curl"))
    body = json.loads(command.split("-d '", 1)[1].rsplit("'", 1)[0])
    output = next(body for language, body in blocks if language == "" and body.startswith("data: "))
    response = httpx.post(f"{readme_duet.base_url}/v1/chat/completions", json=body, timeout=REQUEST_TIMEOUT)
    assert response.status_code == 200, response.text
    streamed = [event if event == "[DONE]" else event["choices"] for event in sse_events(response.content)]
    assert json.loads(CALL_ID.sub("call_", json.dumps(text_merged(streamed)))) == \
        json.loads(CALL_ID.sub("call_", json.dumps(text_merged(shown_choices(output)))))
    first = sse_events(response.content)[0]
    assert (first["object"], first["model"]) == ("chat.completion.chunk", "duet")


def test_the_readme_sdk_round_trip_prints_what_it_shows(readme_duet: DuetServer) -> None:
    blocks = code_blocks(README.read_text())
    index = next(i for i, (language, body) in enumerate(blocks) if language == "python" and "from openai import OpenAI" in body)
    program, shown = blocks[index][1], blocks[index + 1][1]
    assert program.count("http://127.0.0.1:8000/v1") == 1
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(program.replace("http://127.0.0.1:8000/v1", f"{readme_duet.base_url}/v1"), {})  # the README's own example
    assert printed.getvalue() == shown


def test_the_getting_started_examples_are_the_readmes() -> None:
    """The manual shows the same calls as page one (so the test above holds both)."""
    manual = (ROOT / "docs" / "getting-started.md").read_text()
    for language, body in code_blocks(README.read_text()):
        if language == "python" or body.startswith("curl"):
            assert body in manual, body
