"""How long the per-message conversions on the request path take for one large conversation.

The case is the largest a client may send within the limits: 4,096 user messages of 7 KB (about
30 MB). Every conversion runs on the event loop, so its time is how long every other client waits.
Prints the best of ``--repeat`` runs, in milliseconds, for each conversion.

Run from the repository root: ``.venv/bin/python bench/transcript.py``. With ``--http``, also over
HTTP: a fresh ``duet serve`` (scripted upstream) gets that conversation, answered, while a probe
client sends ``GET /v1/models`` back to back; the probe's worst latency is how long every other
client waited (the harness of ``bench/large_body.py``). The figures go to
``bench/results/transcript-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import json
import time

from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage

from duet.agents.continuations import Continuation, splice
from duet.agents._conversation import as_transcript, conversation_from_openai, without_images
from record import begin, save  # this script's folder


def best_ms(work, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4096)
    parser.add_argument("--size", type=int, default=7 * 1024, help="characters per message")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--http", action="store_true", help="also send it to duet serve while probing its event loop")
    args = parser.parse_args()
    run = begin("transcript")
    figures: dict[str, object] = {}
    messages = [{"role": "user", "content": "x" * args.size} for _ in range(args.messages)]
    conversation = conversation_from_openai(messages)
    print(f"{args.messages} user messages of {args.size} characters (best of {args.repeat})")
    figures["conversation_from_openai_ms"] = best_ms(lambda: conversation_from_openai(messages), args.repeat)
    print(f"conversation_from_openai  {figures['conversation_from_openai_ms']:9.1f} ms")
    figures["without_images_ms"] = best_ms(lambda: without_images(conversation), args.repeat)
    print(f"without_images            {figures['without_images_ms']:9.1f} ms")
    figures["as_transcript_ms"] = best_ms(lambda: as_transcript(conversation), args.repeat)
    print(f"as_transcript             {figures['as_transcript_ms']:9.1f} ms")
    # A tool round after the long history, put back from its continuation.
    call = AssistantMessage(content=[], source="assistant")
    results = FunctionExecutionResultMessage(content=[FunctionExecutionResult(content="r", call_id="c", name="f")])
    tail = [*conversation, call, results]
    continuation = Continuation(turn=[call, results], reasoning="")
    figures["splice_ms"] = best_ms(lambda: splice(tail, len(conversation), continuation), args.repeat)
    print(f"splice                    {figures['splice_ms']:9.1f} ms")
    if args.http:
        from large_body import run_case  # this directory is on the path when the script runs

        r = run_case("answered", json.dumps({"model": "duet", "messages": messages}).encode())
        print(f"over HTTP: {r['body_mb']:.1f} MB -> HTTP {r['status']} in {r['request_s'] * 1000:.0f} ms; probe worst "
              f"{r['probe_max_ms']:.0f} ms (idle worst {r['probe_idle_max_ms']:.0f} ms, p50 {r['probe_p50_ms']:.1f} ms, n={r['probes']})")
        figures["http"] = r
    save(run, figures, args)


if __name__ == "__main__":
    main()
