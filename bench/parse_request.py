"""How long each protocol's reader takes (all of a request's checks before any model runs), per body.

Chat Completions bodies: ``small`` (one short message), ``tool-heavy`` (128 tools with four-property
schemas, about 55 KB: still parsed on the event loop), ``large-many-values`` (0.9 MB: 4,096 messages
and an extra field of 200,000 empty arrays, checked before parsing in a worker thread). The same 128
tools as a Responses request (``responses-tool-heavy``) and as a Messages request
(``messages-tool-heavy``: ``input_schema``). A repeated tool list is validated once per content, as
clients send it with every request. Prints the best of ``--repeat`` rounds, per call, in microseconds.

Run from the repository root: ``.venv/bin/python bench/parse_request.py``. The figures go to
``bench/results/parse_request-<time>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from duet.api.chat._service import parse_chat
from duet.api.messages._service import parse_messages
from duet.api.responses import Responses
from duet.api._settings import ServiceOptions
from record import begin, save  # this script's folder

USER = {"role": "user", "content": "hi"}
PROPERTIES = {f"p{j}": {"type": "string", "description": "a field", "enum": ["a", "b"]} for j in range(4)}


def tool_heavy(protocol: str) -> bytes:
    schema = {"type": "object", "properties": PROPERTIES, "required": ["p0"]}
    if protocol == "responses":
        tools = [{"type": "function", "name": f"t{i}", "description": "d", "parameters": schema} for i in range(128)]
        return json.dumps({"model": "duet", "input": "hi", "tools": tools}).encode()
    tools = [{"name": f"t{i}", "description": "d", "input_schema": schema} for i in range(128)]
    return json.dumps({"model": "duet", "max_tokens": 100, "messages": [USER], "tools": tools}).encode()


def bodies() -> dict[str, bytes]:
    def encode(**fields: Any) -> bytes:
        return json.dumps({"model": "duet", "messages": [USER], **fields}).encode()

    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "d",
                                               "parameters": {"type": "object", "properties": PROPERTIES, "required": ["p0"]}}}
             for i in range(128)]
    return {
        "small": encode(),
        "tool-heavy": encode(tools=tools),
        "large-many-values": json.dumps({"model": "duet", "messages": [USER] * 4096, "extra": [[]] * 200_000}).encode(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    run = begin("parse_request")
    figures: dict[str, dict[str, float]] = {}
    options = ServiceOptions()
    responses = Responses(None)  # type: ignore[arg-type] # parsing reads no store
    readers = {name: (raw, parse_chat) for name, raw in bodies().items()}
    readers["responses-tool-heavy"] = (tool_heavy("responses"), responses.parse)
    readers["messages-tool-heavy"] = (tool_heavy("messages"), parse_messages)
    for name, (raw, parse) in readers.items():
        calls = max(1, 20_000 // max(1, len(raw) // 100))
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            for _ in range(calls):
                parse(raw, options)
            best = min(best, (time.perf_counter() - started) / calls)
        print(f"{name:22} {len(raw):>9} bytes  {best * 1e6:10.1f} us")
        figures[name] = {"bytes": len(raw), "best_us": best * 1e6}
    save(run, figures, args)


if __name__ == "__main__":
    main()
