"""The big fuzz campaign: thousands of hostile bodies per protocol route, and a schema-driven run
from ``/openapi.json``, against ``duet serve`` over real HTTP; the counts go to ``bench/results/fuzz-<time>.json``.

Two kinds of bodies, each route in turn (the tests run the same with a small budget):

- property-based (``tests/fuzzing.py``): valid requests of the route mutated into wrong types, huge
  numbers, odd Unicode, deep nesting, random JSON, for Chat Completions, Responses, Messages and
  ``count_tokens``, streamed or not;
- schema-driven (``tests/schema_fuzzing.py``): schemathesis draws requests from the document Duet
  serves, valid ones and ones that break it, for every protocol route.

Counted per route: bodies tried, statuses, 5xx, HTTP 200s carrying an error, requests Duet sent the
upstream that failed there (the scripted upstream refuses what OpenAI's documented rules refuse:
``tests/openai_rules.py``), models called for a refused request, and for the schema-driven run every
answer that breaks the document. All must be 0. The run is seeded (``--seed``): the same seed draws
the same bodies. Run from the repository root: ``.venv/bin/python bench/fuzz.py`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import API_KEY, DuetServer, pipelines_config  # noqa: E402
from tests.fuzzing import ROUTES, Route, Tally, hostile_body, problems  # noqa: E402
from tests.schema_fuzzing import OPERATIONS, SchemaFuzz  # noqa: E402
from record import begin, save  # noqa: E402
from tests.scripted_upstream import ScriptedUpstream  # noqa: E402

CAMPAIGN = dict(phases=[Phase.generate], database=None, deadline=None, suppress_health_check=list(HealthCheck))  # counts, no shrinking


def property_based(route: Route, bodies: int, run_seed: int, server: DuetServer, upstream: ScriptedUpstream) -> Tally:
    tally = Tally()
    headers = {"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
    with httpx.Client(base_url=server.base_url, timeout=60) as client:

        @seed(run_seed)
        @settings(max_examples=bodies, **CAMPAIGN)  # type: ignore[arg-type]
        @given(case=hostile_body(route))
        def campaign(case: tuple[bytes, bool]) -> None:
            raw, _ = case
            upstream.enforce_openai_rules()
            calls = len(upstream.requests)
            response = client.post(route.path, content=raw, headers=headers)
            tally.add(response, problems(route, response, upstream, calls), raw)
            upstream.requests.clear()  # nothing of a body is kept past its count (the campaign sends thousands)

        campaign()
    return tally


def schema_driven(path: str, method: str, bodies: int, run_seed: int, document: dict[str, Any], server: DuetServer,
                  upstream: ScriptedUpstream) -> dict[str, Any]:
    counts: dict[str, Any] = {"bodies": 0, "problems": 0, "failed_at_upstream": 0, "examples": []}
    for negative in (False, True):
        fuzz = SchemaFuzz(document, server.base_url, API_KEY)

        @seed(run_seed)
        @settings(max_examples=bodies // 2, **CAMPAIGN)  # type: ignore[arg-type]
        @given(data=st.data())
        def campaign(data: st.DataObject) -> None:
            upstream.enforce_openai_rules()
            found = fuzz.send(data, path, method, negative, upstream)
            counts["bodies"] += 1
            counts["problems"] += bool(found)
            counts["failed_at_upstream"] += sum(problem.startswith("the upstream refused") for problem in found)
            if found and len(counts["examples"]) < 5:
                counts["examples"].append(found[0][:600])
            upstream.requests.clear()

        try:
            campaign()
        finally:
            fuzz.close()
        counts.setdefault("statuses", {})["invalid" if negative else "valid"] = dict(sorted(fuzz.statuses.items()))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=2000, help="property-based bodies per route (default 2000)")
    parser.add_argument("--schema-bodies", type=int, default=2000, help="schema-driven requests per route, half valid (default 2000; 0: none)")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--routes", default=",".join(ROUTES), help=f"property-based routes (default: {','.join(ROUTES)})")
    parser.add_argument("--out", type=Path, help="the results file (default: bench/results/fuzz-<time>.json)")
    parser.add_argument("--label", default="", help="a note kept with the results (which code ran)")
    args = parser.parse_args()

    run = begin("fuzz")
    results: dict[str, Any] = {"seed": args.seed, "property_based": {}, "schema_driven": {}}
    started = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix="duet-fuzz-"))
    with ScriptedUpstream() as upstream:
        config = directory / "duet.yaml"
        config.write_text(yaml.safe_dump(pipelines_config(upstream.base_url)))
        server = DuetServer(["--config", str(config)], {"DUET_API_KEYS": API_KEY, "UPSTREAM_KEY": "upstream-secret", "DUET_DOCS": "true"},
                            directory / "duet.log")
        try:
            for name in args.routes.split(","):
                tally = property_based(ROUTES[name], args.bodies, args.seed, server, upstream)
                results["property_based"][name] = tally.as_dict()
                print(f"property-based {name}: {json.dumps({k: v for k, v in tally.as_dict().items() if k != 'examples'})}", flush=True)
            document = httpx.get(f"{server.base_url}/openapi.json").json() if args.schema_bodies else {}
            for path, method in OPERATIONS if args.schema_bodies else ():
                counts = schema_driven(path, method, args.schema_bodies, args.seed, document, server, upstream)
                results["schema_driven"][f"{method} {path}"] = counts
                print(f"schema-driven {method} {path}: {json.dumps({k: v for k, v in counts.items() if k != 'examples'})}", flush=True)
        finally:
            server.stop()
        log = (directory / "duet.log").read_text()
    results["log_errors"] = log.count("unexpected error") + log.count("Traceback")
    results["totals"] = totals(results)
    results["seconds"] = round(time.monotonic() - started)
    save(run, results, {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, args.label, args.out)
    print(json.dumps(results["totals"], indent=2))
    sys.exit(0 if not any(results["totals"][key] for key in ("5xx", "200_with_error", "failed_at_upstream", "other_problems")) else 1)


def totals(results: dict[str, Any]) -> dict[str, int]:
    routes = results["property_based"].values()
    schema = results["schema_driven"].values()
    return {
        "property_based_bodies": sum(r["bodies"] for r in routes),
        "schema_driven_bodies": sum(s["bodies"] for s in schema),
        "5xx": sum(r["5xx"] for r in routes) + sum(count for s in schema for mode in s["statuses"].values()
                                                   for status, count in mode.items() if int(status) >= 500),
        "200_with_error": sum(r["200_with_error"] for r in routes),
        "failed_at_upstream": sum(r["failed_at_upstream"] for r in routes) + sum(s["failed_at_upstream"] for s in schema),
        "other_problems": sum(r["model_called_for_a_refusal"] + r["other_problems"] for r in routes) + sum(s["problems"] for s in schema),
        "log_errors": results["log_errors"],
    }


if __name__ == "__main__":
    main()
