"""Upstream calls per user call under faults (issue 26): how many times a rate-limited answer model or
a failing reasoner makes the reasoner and the answer model be called, for one call of a user's client.

Clients, each real and with its own default retries: the openai SDK (and every framework built on it),
the anthropic SDK (Claude Code's own client, on ``/v1/messages``), LlamaIndex's OpenAI LLM (``chat`` and
``stream_chat``: the openai SDK's 3 retries inside its own 3 attempts), and two coding agents run headless
on one prompt, each stopped after 120 s: Claude Code (``claude -p``, ``/v1/messages``) and Codex CLI
(``codex exec``, ``/v1/responses``). Faults: the answer model answers 429 with ``Retry-After: 1`` (within
what Duet waits out) or ``7`` (beyond), or the reasoner answers 500. Besides the calls, each figure says
how many distinct conversations the reasoner was asked about (a coding agent's side requests, such as a
title, are conversations of their own).

Run it once with this checkout's ``duet`` and once with another's (``--duet``: the command that runs
it, e.g. a checkout of main before the change), interleaved; each run writes
``bench/results/reasoning_once-<time>.json``::

    .venv/bin/python bench/reasoning_once.py --label after
    .venv/bin/python bench/reasoning_once.py --label before --duet /tmp/before/.venv/bin/duet
    .venv/bin/python bench/reasoning_once.py --clients "Claude Code;Codex CLI" --faults "reasoner 500"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import anthropic
import openai
import yaml

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after this script's folder: tests/

from harness import DUET, free_port, stop, wait_up
from record import begin, save
from tests import coding_agents, llama_index_client
from tests.scripted_upstream import Reply, ScriptedUpstream

REASONER, ANSWER = "once-r1", "once-answer"
PIPELINE = "once"
AGENT_SECONDS = 120  # a coding agent's wall time for one prompt (it may still be retrying then)
FAULTS: dict[str, tuple[str, Reply]] = {
    "answer 429, Retry-After 1": (ANSWER, Reply(status=429, error_message="slow down", headers={"Retry-After": "1"})),
    "answer 429, Retry-After 7": (ANSWER, Reply(status=429, error_message="slow down", headers={"Retry-After": "7"})),
    "reasoner 500": (REASONER, Reply(status=500, error_message="reasoner crashed")),
}


def openai_sdk(base: str, question: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="bench", timeout=120)
    client.chat.completions.create(model=PIPELINE, messages=[{"role": "user", "content": question}])


def anthropic_sdk(base: str, question: str) -> None:
    client = anthropic.Anthropic(base_url=base, api_key="bench", timeout=120)
    client.messages.create(model=PIPELINE, max_tokens=200, messages=[{"role": "user", "content": question}])


def llama_index_chat(base: str, question: str) -> None:
    llama_index_client.chat(base, "bench", question)


def llama_index_stream_chat(base: str, question: str) -> None:
    llama_index_client.chat(base, "bench", question, stream=True)


def claude_code(base: str, question: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        finished = coding_agents.claude_code(base, "bench", question, Path(directory), Path(directory) / "home", timeout=AGENT_SECONDS)
    agent_outcome(finished)


def codex_cli(base: str, question: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        finished = coding_agents.codex_exec(base, "bench", question, Path(directory), Path(directory) / "home", model=PIPELINE,
                                            timeout=AGENT_SECONDS)
    agent_outcome(finished)


def agent_outcome(finished: coding_agents.Finished) -> None:
    if finished.returncode is None:
        raise TimeoutError(f"still running after {AGENT_SECONDS} s: stopped")
    if finished.returncode != 0:
        raise RuntimeError(f"exit status {finished.returncode}: {finished.stderr[-300:]}")


CLIENTS: dict[str, Callable[[str, str], None]] = {
    "openai SDK": openai_sdk, "anthropic SDK (Claude Code's client)": anthropic_sdk,
    "LlamaIndex chat": llama_index_chat, "LlamaIndex stream_chat": llama_index_stream_chat,
    "Claude Code": claude_code, "Codex CLI": codex_cli,
}


def serve(duet: str, upstream: ScriptedUpstream, directory: Path, *, rethink: bool = False) -> tuple[Any, str]:
    """``duet serve`` (the given console script) with one pipeline on the scripted upstream, defaults
    otherwise; with ``rethink``, a second one, ``rethink``, whose reasoner thinks again on tool results."""
    reasoner = {"base_url": upstream.base_url, "model": REASONER}
    answer = {"base_url": upstream.base_url, "model": ANSWER}
    pipelines: list[dict[str, Any]] = [{"name": PIPELINE, "reasoner": reasoner, "answer": answer}]
    if rethink:
        pipelines.append({"name": "rethink", "reasoner": {**reasoner, "reason_on_tool_results": True}, "answer": answer})
    config = directory / "duet.yaml"
    # Model names clients insist on: Claude Code's own, and one LlamaIndex's OpenAI class knows.
    aliases = {"claude-*": PIPELINE, llama_index_client.MODEL: PIPELINE}
    config.write_text(yaml.safe_dump({"model_aliases": aliases, "pipelines": pipelines}))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUET_")}
    env.update({"DUET_PORT": str(port), "DUET_LOG_LEVEL": "warning", "DUET_STATE_URL": f"sqlite:///{directory / 'state.db'}"})
    process = subprocess.Popen([*shlex.split(duet), "serve", "--config", str(config)], env=env, cwd=directory,
                               stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_up(f"{base}/health", process=process)
    return process, base


def measure(duet: str, clients: list[str], faults: list[str]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with ScriptedUpstream() as upstream, tempfile.TemporaryDirectory() as directory:
        process, base = serve(duet, upstream, Path(directory))
        try:
            for fault in faults:
                for name in clients:
                    upstream.reset()
                    model, reply = FAULTS[fault]
                    upstream.script(model, *[reply] * 200)
                    started = time.monotonic()
                    outcome = "ok"
                    try:
                        # A question of its own: the same one again would reuse the reasoning of the last measurement.
                        CLIENTS[name](base, f"What is 17 * 23? ({fault}, {name})")
                    except Exception as exc:  # noqa: BLE001 - the user call failed: that is a figure too
                        outcome = type(exc).__name__
                    reasoner_calls = upstream.requests_for(REASONER)
                    figures[f"{fault} | {name}"] = {
                        "reasoner_calls": len(reasoner_calls), "answer_calls": len(upstream.requests_for(ANSWER)),
                        "reasoner_conversations": len({json.dumps(call.body.get("messages"), sort_keys=True) for call in reasoner_calls}),
                        "seconds": round(time.monotonic() - started, 2), "outcome": outcome}
                    print(f"{fault:28} {name:38} {figures[f'{fault} | {name}']}", flush=True)
        finally:
            stop(process)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duet", default=DUET, help="the command that runs duet (default: this checkout's console script); "
                        "e.g. '/tmp/before/.venv/bin/python -m duet.api' for another checkout")
    parser.add_argument("--label", default="")
    parser.add_argument("--clients", default=";".join(CLIENTS), help="semicolon-separated, of: " + ", ".join(CLIENTS))
    parser.add_argument("--faults", default=";".join(FAULTS), help="semicolon-separated, of: " + ", ".join(FAULTS))
    options = parser.parse_args()
    run = begin("reasoning_once")
    figures = measure(options.duet, options.clients.split(";"), options.faults.split(";"))
    save(run, figures, options={"duet": options.duet, "clients": options.clients, "faults": options.faults},
         label=options.label)


if __name__ == "__main__":
    main()
