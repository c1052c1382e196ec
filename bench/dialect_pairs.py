"""Every reasoner × answer pair of the replayed model-server dialects (tests/replays/), through
``duet serve`` on 127.0.0.1: for each pair, on Chat Completions, Responses and Messages, streamed and
not, the work order's checks (:mod:`tests.replays.try_duet`): a text turn (the answer intact, the
reasoning complete and only in the reasoning) and a client-tool round trip (the upstream refuses
what its server would refuse).

``tests/http/test_dialects.py`` checks each dialect in each role beside one well-behaved partner on
every run of the suite; this script checks the whole cross product (17 × 17 pairs × 6 conversations),
too long for the suite, and records what failed::

    python bench/dialect_pairs.py            # from the repository root, with the test venv
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

import record  # noqa: E402 - bench/ and the repository root on the path first
from tests.replays import DIALECTS, ReplayUpstream  # noqa: E402
from tests.replays.try_duet import PROTOCOLS, guarded, pair_config, round_trip, start_duet, text_turn  # noqa: E402


def pair_problems(upstream: ReplayUpstream, base: str, reasoner: str, answer: str) -> list[str]:
    pipeline = f"x-{reasoner}-{answer}"
    problems = []
    for protocol in PROTOCOLS:
        for stream in (False, True):
            where = f"{pipeline} {protocol} {'stream' if stream else 'whole'}"
            problems += [f"{where} text: {p}" for p in guarded(lambda: text_turn(base, pipeline, "r", protocol, stream))]
            problems += [f"{where} round trip: {p}" for p in guarded(lambda: round_trip(upstream, base, pipeline, protocol, stream))]
    return problems


def main() -> None:
    run = record.begin("dialect_pairs")
    pairs = [(r, a) for r in DIALECTS for a in DIALECTS]
    with ReplayUpstream(pace=0.0002) as upstream, tempfile.TemporaryDirectory() as directory:
        process, base = start_duet(upstream, Path(directory), pair_config(upstream))
        try:
            with ThreadPoolExecutor(4) as pool:
                found = list(pool.map(lambda pair: pair_problems(upstream, base, *pair), pairs))
        finally:
            process.terminate()
            process.wait(15)
    failed = {f"{r} -> {a}": problems for (r, a), problems in zip(pairs, found, strict=True) if problems}
    for pair, problems in failed.items():
        print(pair, *problems, sep="\n  ")
    conversations = len(pairs) * len(PROTOCOLS) * 2
    print(f"{len(pairs) - len(failed)} of {len(pairs)} pairs pass every check ({conversations} conversations, each a text turn and a round trip)")
    record.save(run, {"pairs": len(pairs), "pairs_passing": len(pairs) - len(failed), "conversations": conversations,
                      "failed": failed}, options={"dialects": sorted(DIALECTS)})


if __name__ == "__main__":
    main()
