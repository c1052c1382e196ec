"""The walk of one streamed request with tools: the steps and package switches of Duet's own code
between the route's endpoint and the response object, and on to the first SSE byte.

Serves one streamed Chat Completions request with two client tools through an in-process app (the
ASGI app :func:`duet.api.create_app` makes, called directly: no server, no socket on Duet's side)
and the scripted upstream (``tests/scripted_upstream.py``, on its own thread), after one identical
request untraced (the caches a steady service has are warm). The traced request runs under
:func:`sys.setprofile`, and this is what is counted:

- a *Duet function* is a function defined in a file under the checkout's ``agents/``, ``api/``,
  ``workbenches/`` or ``duet/`` folders, or the ``__init__`` / ``__new__`` of a class defined there
  (a dataclass's, a pydantic model's, a named tuple's), whose code lives elsewhere;
- the *flow* is the functions that hold the whole request and hand it on, named in :data:`FLOW`:
  the route's ASGI app and endpoint, the request flow (``Service.create``), the protocol's reader
  (``prepare``: the wire request becomes the run's request), and after the response object the
  response's ``__call__`` and ``_run`` and the event source's ``start`` and ``chunks``;
- a *step* is a call of a Duet function made directly by a frame of a flow function: not a call
  nested in a step (a helper of a helper), not one made through a C function (a pydantic validator
  run by ``model_validate``), and not a coroutine or generator resuming (each frame counts once);
- a step's *package* is the package of the module defining the function (``duet.api._serving`` →
  ``duet.api``, ``duet.api.chat._service`` → ``duet.api.chat``, ``duet.agents.pipeline._duet`` →
  ``duet.agents.pipeline``, ``duet._wire_json`` → ``duet``); a *package switch* is two consecutive
  steps in different packages, counted from the endpoint's package (``duet.api``);
- *before the response object*: the steps made before the ``EventStreamResponse`` is constructed
  (and that construction, when it is a step); *to the first SSE byte*: up to the ``send`` of the
  first body bytes;
- beside the steps, every Duet function call of the route's own task, nested ones included (*all
  calls*), with its package switches: what the steps leave out, so that hiding calls in helpers
  shows.

Prints each step (package, function, the flow function that made it) and the totals, and records
them (``bench/results/walk-<time>.json``, :mod:`record`; ``figures.walked_commit`` is the code
walked). ``--root`` runs the code of another checkout (a ``git worktree`` of an older commit) with
this checkout's scripted upstream::

    python bench/walk.py --label after                       # this checkout
    git worktree add --detach /tmp/duet-old dfb86bf
    python bench/walk.py --root /tmp/duet-old --label before
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from record import begin, save  # this script's folder

HERE = Path(__file__).resolve().parent.parent
ROOMS = ("agents", "api", "workbenches", "duet")

FLOW = frozenset({
    "as_asgi.<locals>.app",  # the route's ASGI app: the endpoint, then the response it returns
    "protocol_endpoint.<locals>.endpoint",
    "Service.create",
    "ChatCompletions.prepare",
    "EventStreamResponse.__call__",
    "EventStreamResponse._run",
    "_EventSource.start",
    "_EventSource.chunks",
})
"""The flow functions, by qualified name (in Duet's files only)."""

RESPONSE_OBJECT = "EventStreamResponse.__init__"
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "book_table", "description": "Books a table.",
                                      "parameters": {"type": "object", "properties": {"place": {"type": "string"},
                                                                                      "people": {"type": "integer"}}}}},
]
REASONER, ANSWER = "walk-r1", "walk-answer"


def use_checkout(root: Path) -> None:
    """Imports ``duet`` from ``root``: its ``duet/`` folder, with ``agents/``, ``api/`` and
    ``workbenches/`` beside it as the sub-packages (what ``package-dir`` maps when installed)."""
    sys.path.insert(0, str(root))
    import duet

    if Path(duet.__file__).resolve().parent != root / "duet":
        raise SystemExit(f"duet was imported from {duet.__file__}, not from {root}")
    duet.__path__ = [str(root / "duet"), str(root)]  # type: ignore[attr-defined]  # duet.agents → root/agents


@dataclass
class Step:
    package: str
    function: str
    caller: str


@dataclass
class Walk:
    steps: list[Step] = field(default_factory=list)
    response_object_at: int | None = None  # steps made before the response object was (and its construction)
    first_byte_at: int | None = None
    calls: list[Step] = field(default_factory=list)  # every Duet call of the route's task, nested ones too
    calls_at_response_object: int | None = None


class Tracer:
    """The profile function: records the steps of the flow (see the module's docstring)."""

    def __init__(self, root: Path) -> None:
        self.rooms = tuple(str(root / room) + os.sep for room in ROOMS)
        self.root = root
        self.walk = Walk()
        self.seen: set[types.FrameType] = set()  # frames already entered (a coroutine resuming is no new call)
        self.in_c: dict[types.FrameType, int] = {}  # flow frames inside a C call, and how deep
        self.route_task: asyncio.Task[Any] | None = None  # the task that runs the route's endpoint

    def module_of(self, code: types.CodeType) -> str | None:
        path = code.co_filename
        if not path.startswith(self.rooms):
            return None
        parts = list(Path(path).relative_to(self.root).with_suffix("").parts)
        if parts[0] != "duet":
            parts.insert(0, "duet")
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def duet_function(self, frame: types.FrameType) -> tuple[str, str] | None:
        """(module, qualified name) of a Duet function's frame, else None."""
        code = frame.f_code
        module = self.module_of(code)
        if module is not None:
            return module, code.co_qualname
        if code.co_name in ("__init__", "__new__"):  # a constructor whose code is generated or inherited
            owner = frame.f_locals.get("self", frame.f_locals.get("cls", frame.f_locals.get("_cls")))
            cls = owner if isinstance(owner, type) else type(owner)
            if cls.__module__.startswith("duet."):
                return cls.__module__, f"{cls.__qualname__}.{code.co_name}"
        return None

    def is_flow(self, frame: types.FrameType | None) -> bool:
        return frame is not None and frame.f_code.co_qualname in FLOW and self.module_of(frame.f_code) is not None

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            if self.is_flow(frame):
                self.in_c[frame] = self.in_c.get(frame, 0) + 1
            return
        if event in ("c_return", "c_exception"):
            if frame in self.in_c:
                self.in_c[frame] -= 1
                if not self.in_c[frame]:
                    del self.in_c[frame]
            return
        if event != "call" or frame in self.seen:
            return
        self.seen.add(frame)
        found = self.duet_function(frame)
        if found is None:
            return
        module, name = found
        package = module if hasattr(sys.modules.get(module), "__path__") else module.rpartition(".")[0]
        walk = self.walk
        if name == "protocol_endpoint.<locals>.endpoint" and self.route_task is None:
            self.route_task = asyncio.current_task()
        caller = frame.f_back
        if self.route_task is not None and asyncio.current_task() is self.route_task:
            walk.calls.append(Step(package, name, caller.f_code.co_qualname if caller is not None else ""))
        is_step = self.is_flow(caller) and caller not in self.in_c
        if name == RESPONSE_OBJECT and walk.response_object_at is None:
            walk.response_object_at = len(walk.steps) + is_step
            walk.calls_at_response_object = len(walk.calls)
        if is_step:
            walk.steps.append(Step(package, name, caller.f_code.co_qualname))  # type: ignore[union-attr]


def switches(packages: list[str], start: str = "duet.api") -> int:
    count, current = 0, start
    for package in packages:
        if package != current:
            count += 1
            current = package
    return count


async def serve_one(app: Any, body: bytes, tracer: Tracer | None) -> None:
    """One POST to the app, as an ASGI server makes it; traced by ``tracer`` until the first body bytes."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                         (b"host", b"127.0.0.1")],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {}}
    done = asyncio.Event()
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            if message.get("body") and tracer is not None and tracer.walk.first_byte_at is None:
                sys.setprofile(None)
                tracer.walk.first_byte_at = len(tracer.walk.steps)
            if not message.get("more_body", False):
                done.set()
        elif message["type"] == "http.response.start":
            assert message["status"] == 200, message

    if tracer is not None:
        sys.setprofile(tracer)
    try:
        await asyncio.wait_for(app(scope, receive, send), 30)
    finally:
        sys.setprofile(None)


async def measure(root: Path) -> Walk:
    sys.path.insert(0, str(HERE))  # this checkout's scripted upstream
    from tests.scripted_upstream import Reply, ScriptedCall, ScriptedUpstream
    from duet.api import create_app

    with ScriptedUpstream() as upstream:
        for _ in range(2):
            upstream.script(REASONER, Reply(reasoning=["The user wants the weather", " in Paris."]))
            upstream.script(ANSWER, Reply(tool_calls=[ScriptedCall("get_weather", '{"city": "Paris"}')]))
        os.environ.update({"DUET_REASONER_BASE_URL": upstream.base_url, "DUET_REASONER_MODEL": REASONER,
                           "DUET_ANSWER_BASE_URL": upstream.base_url, "DUET_ANSWER_MODEL": ANSWER,
                           "DUET_API_KEYS": "", "DUET_STATE_URL": "memory://", "DUET_LOG_LEVEL": "warning"})
        app = create_app()
        body = json.dumps({"model": "duet", "stream": True, "tools": TOOLS,
                           "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}).encode()
        tracer = Tracer(root)
        async with app.router.lifespan_context(app):
            await serve_one(app, body, None)  # warm: what a steady service has cached
            await serve_one(app, body, tracer)
        return tracer.walk


def commit_of(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def report(walk: Walk, root: Path) -> dict[str, Any]:
    before = [step.package for step in walk.steps[: walk.response_object_at or 0]]
    to_byte = walk.steps[: walk.first_byte_at or len(walk.steps)]
    calls = [call.package for call in walk.calls[: walk.calls_at_response_object or 0]]
    return {
        "root": str(root),
        "walked_commit": commit_of(root),
        "before_response_object": {"steps": len(before), "package_switches": switches(before),
                                   "all_calls": len(calls), "all_calls_package_switches": switches(calls)},
        "to_first_sse_byte": {"steps": len(to_byte), "package_switches": switches([step.package for step in to_byte])},
        "steps": [asdict(step) for step in to_byte],
        "all_calls_before_response_object": [asdict(call) for call in walk.calls[: walk.calls_at_response_object or 0]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout whose code is walked (default: this one)")
    parser.add_argument("--label", default="", help="a note in the results file (before, after...)")
    parser.add_argument("--all", action="store_true", help="also print every call of the route's task before the response object")
    args = parser.parse_args()
    root = args.root.resolve()
    if root != HERE:
        use_checkout(root)
    run = begin("walk")
    walk = asyncio.run(measure(root))
    result = report(walk, root)
    for index, step in enumerate(result["steps"], 1):
        print(f"{index:3d}  {step['package']:<24} {step['function']:<48} from {step['caller']}")
        if index == result["before_response_object"]["steps"]:
            print("     ---- the response object is made")
    if args.all:
        print("every Duet call of the route's task before the response object:")
        for index, call in enumerate(result["all_calls_before_response_object"], 1):
            print(f"{index:3d}  {call['package']:<24} {call['function']:<48} from {call['caller']}")
    before, to_byte = result["before_response_object"], result["to_first_sse_byte"]
    print(f"before the response object: {before['steps']} steps, {before['package_switches']} package switches "
          f"(all calls of the route's task: {before['all_calls']}, {before['all_calls_package_switches']} package switches)")
    print(f"to the first SSE byte: {to_byte['steps']} steps, {to_byte['package_switches']} package switches")
    save(run, result, {"root": str(root), "label": args.label, "all": args.all}, label=args.label)


if __name__ == "__main__":
    main()
