"""Where every benchmark run's figures go: one JSON file per run under ``bench/results/``.

Each script in ``bench/`` starts its run with :func:`begin` (the time, the load average) and ends it
with :func:`save`, which writes ``bench/results/<bench>-<YYYYmmdd-HHMMSS>.json``::

    {"bench": "bench", "label": "", "command": "bench/bench.py --rounds 5", "commit": "dc9dbf3",
     "started": "2026-11-28T10:00:00", "finished": "...", "seconds": 95, "cores": 2, "python": "3.11.2",
     "load_average": {"before": [..], "after": [..]}, "options": {...}, "figures": {...}}

``commit`` is the checkout's ``HEAD`` (``-dirty`` when the work tree has changes), so a figure is
always read beside the code it measured. ``DUET_BENCH_LABEL`` (or a script's ``--label``) adds a
note (say, ``before`` or ``after`` of a change). History is these files, not prose.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


@dataclass
class Run:
    """A benchmark run under way: what :func:`save` writes beside the figures."""

    bench: str
    started: float = field(default_factory=time.time)
    load_before: tuple[float, float, float] = field(default_factory=os.getloadavg)


def begin(bench: str) -> Run:
    """Marks a run's start (call it before the first measurement)."""
    return Run(bench)


def commit() -> str:
    """The checkout's ``HEAD`` (short), with ``-dirty`` when tracked files have changed; ``""`` outside git."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("rev-parse", "--short", "HEAD")
    return f"{head}-dirty" if head and git("status", "--porcelain", "--untracked-files=no") else head


def command() -> str:
    """The command line that ran the script, its path relative to the repository."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    return " ".join([str(shown), *sys.argv[1:]])


def save(run: Run, figures: Any, options: Any = None, label: str = "", out: Path | None = None) -> Path:
    """Writes the run's figures with when, where and on what code they were measured, and the
    script's ``options`` (its parsed arguments, defaults included); returns the file. ``out``
    overrides the file's path (default: ``bench/results/<bench>-<time>.json``)."""
    finished = time.time()
    record = {
        "bench": run.bench,
        "label": label or os.environ.get("DUET_BENCH_LABEL", ""),
        "command": command(),
        "commit": commit(),
        "duet_checkout": os.environ.get("DUET_BENCH_CHECKOUT", ""),  # Duet served from another checkout (checkout_duet.py)
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(run.started)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(finished)),
        "seconds": round(finished - run.started, 1),
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "load_average": {"before": list(run.load_before), "after": list(os.getloadavg())},
        "options": vars(options) if hasattr(options, "__dict__") else options,
        "figures": figures,
    }
    if out is None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"{run.bench}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(run.started))}.json"
    out.write_text(json.dumps(record, indent=2, default=str) + "\n")
    shown = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    print(f"results: {shown}", file=sys.stderr)
    return out
