"""How long ``parse_request`` takes (all of a request's checks before any model runs), per body.

Bodies: ``small`` (one short message), ``tool-heavy`` (128 tools with four-property schemas, about
55 KB: still parsed on the event loop), ``large-many-values`` (0.9 MB: 4,096 messages and an extra
field of 200,000 empty arrays, checked before parsing in a worker thread). Prints the best of
``--repeat`` rounds, per call, in microseconds.

Run from the repository root: ``.venv/bin/python bench/parse_request.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from duet.api.chat import _parse_request
from duet.api.settings import ServiceOptions

USER = {"role": "user", "content": "hi"}
PROPERTIES = {f"p{j}": {"type": "string", "description": "a field", "enum": ["a", "b"]} for j in range(4)}


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
    options = ServiceOptions()
    for name, raw in bodies().items():
        calls = max(1, 20_000 // max(1, len(raw) // 100))
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            for _ in range(calls):
                _parse_request(raw, options)
            best = min(best, (time.perf_counter() - started) / calls)
        print(f"{name:18} {len(raw):>9} bytes  {best * 1e6:10.1f} us")


if __name__ == "__main__":
    main()
