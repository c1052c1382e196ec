"""What watching a request costs, in-process: a two-stage request's model streams (40 + 40 pieces)
read bare, then watched as ``duet serve`` watches them (metrics, the request's log line, traces off),
then with traces on (spans batched for an exporter that drops them). Interleaved rounds, medians of
the microseconds per request. A busy machine inflates all three alike; the differences are the cost.

Run from the repository root: ``python bench/observability.py`` (``--help``). The figures go to
``bench/results/observability-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import statistics
import time
from typing import Any, AsyncGenerator, Sequence

from autogen_core.models import CreateResult, RequestUsage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from duet.agents._observe import observe_model_call
from duet.api.observability._logs import configure_logging
from duet.api.observability._requests import Observability, RequestObservation
from record import begin, save  # this script's folder

RESULT = CreateResult(finish_reason="stop", content="x", usage=RequestUsage(prompt_tokens=50, completion_tokens=40), cached=False)


async def upstream(pieces: int) -> AsyncGenerator[Any, None]:
    for _ in range(pieces):
        yield "token"
    yield RESULT


async def one_request(hub: Observability | None, pieces: int) -> None:
    observation = RequestObservation(hub, "id", "POST", "/v1/chat/completions", "chat.completions", None) if hub else None
    if observation is not None:
        observation.pipeline = "duet"
    for stage in ("reasoner", "answer"):
        async for _ in observe_model_call(observation, stage, "model", upstream(pieces)):
            pass
    if observation is not None:
        observation.finish(200)


class Dropped(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def measure(hub: Observability | None, requests: int, pieces: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        await one_request(hub, pieces)
    return (time.perf_counter() - started) / requests * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per round and case")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pieces", type=int, default=40, help="pieces per model stream")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    args = parser.parse_args()
    run = begin("observability")
    configure_logging("info", args.log_format)
    for handler in logging.getLogger().handlers:
        handler.setStream(io.StringIO())  # type: ignore[attr-defined]  # formatted, not printed
    watched = Observability(metrics=True)
    traced = Observability(metrics=True)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    traced.tracer = provider.get_tracer("bench")
    cases = {"bare (nothing watches)": None, "watched, traces off": watched, "watched, traces on": traced}
    figures: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, hub in cases.items():
            figures[name].append(await measure(hub, args.requests, args.pieces))
    bare = statistics.median(figures["bare (nothing watches)"])
    print(f"two model streams of {args.pieces} pieces; medians of {args.rounds} interleaved rounds of {args.requests} requests;"
          f" log format {args.log_format}")
    print("| case | µs per request | over bare |")
    print("|---|---|---|")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.1f} | {median - bare:+.1f} |")
    provider.shutdown()
    save(run, {"us_per_request": {name: statistics.median(values) for name, values in figures.items()}, "rounds": figures}, args)


if __name__ == "__main__":
    asyncio.run(main())
