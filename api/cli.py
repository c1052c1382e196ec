"""The ``duet`` command: ``duet serve`` and ``duet export-team``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Sequence


def _import_from_working_directory() -> None:
    """Function tools are named by import path (``mytools:lookup``): like uvicorn and gunicorn,
    look for them in the directory the command runs in."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def given_flags(args: argparse.Namespace, *names: str) -> dict[str, object]:
    """The flags the command line set, as :class:`~duet.api.settings.EnvSettings` arguments: the
    settings' first source, so a flag wins over its ``DUET_*`` variable and the YAML file."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


SERVE_FLAGS = ("config", "team", "model_name", "reasoning_output", "host", "port", "workers")
"""The flags of ``duet serve``, each the name of an :class:`~duet.api.settings.EnvSettings` field."""


def start_process(log_level: str, log_format: str = "text", worker: bool = False) -> None:
    """What a process that serves Duet sets before it builds the app (``duet serve`` and each of its workers)."""
    from .observability import configure_logging, configure_tracing
    from .process import configure_process

    configure_logging(log_level, log_format, worker)  # type: ignore[arg-type]
    configure_process()
    configure_tracing()  # raises for OTEL_* settings it cannot honour


def one_line(exc: Exception) -> str:
    """An error for the operator on one line: a settings error names each field and what is wrong with it."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    problems = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        where = ".".join(str(part) for part in error["loc"])
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def _serve(args: argparse.Namespace) -> None:
    _import_from_working_directory()
    from .app import ServiceConfig, create_app
    from .server import serve
    from .settings import EnvSettings
    from .workers import Supervisor, WorkerSpec, listen

    try:
        env = EnvSettings(**given_flags(args, *SERVE_FLAGS))  # reads the YAML file's service-wide options too
        start_process(env.log_level, env.log_format)
        config = ServiceConfig.from_env(env)
        app = create_app(config)  # builds every pipeline: fails before binding the port (once, for every worker)
    except Exception as exc:  # noqa: BLE001 - reported to the operator, then exit
        print(f"duet: cannot start: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    if env.workers == 1:
        serve(app, config.options, app.state.gate, host=env.host, port=env.port, log_level=env.log_level.lower())
        return
    del app  # it proved the configuration builds; each worker builds its own
    try:
        listener = listen(env.host, env.port)
    except OSError as exc:
        print(f"duet: cannot start: cannot listen on {env.host}:{env.port}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    spec = WorkerSpec(config, env.host, env.port, env.log_level.lower())
    raise SystemExit(Supervisor(spec, listener, env.workers).run())


def _export_team(args: argparse.Namespace) -> None:
    _import_from_working_directory()
    from duet.agents import PipelineSettings, export_team
    from duet.workbenches import ServiceTools, proxy_tools_from_openai

    from .app import ServiceConfig
    from .settings import EnvSettings

    pipelines = ServiceConfig.from_env(EnvSettings(**given_flags(args, "config"))).pipelines
    chosen = next((p for p in pipelines if args.pipeline in (None, p.name)), None)
    if chosen is None:
        raise SystemExit(f"duet: no pipeline named {args.pipeline!r}; there are: {', '.join(p.name for p in pipelines)}")
    if not isinstance(chosen, PipelineSettings):
        raise SystemExit(f"duet: pipeline {chosen.name!r} is already a team file")
    tools = []
    if args.tools:
        data = json.loads(Path(args.tools).read_text())
        tools = proxy_tools_from_openai(data["tools"] if isinstance(data, dict) else data)

    async def export() -> dict[str, object]:
        services = ServiceTools.from_settings(chosen.tools)
        await services.open()  # MCP servers are asked for their tool lists
        try:
            return export_team(chosen, client_tools=tools, service_tools=services.tools, studio=args.studio)
        finally:
            await services.close()

    document = asyncio.run(export())
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The ``duet`` command line; each command's handler is its ``handler`` default."""
    parser = argparse.ArgumentParser(prog="duet", description="A reasoning model and an answer model behind one OpenAI-compatible endpoint.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the OpenAI-compatible service")
    serve.add_argument("--host", help="interface to bind (DUET_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (DUET_PORT, default 8000)")
    serve.add_argument("--config", help="YAML file with pipelines (DUET_CONFIG)")
    serve.add_argument("--team", help="serve this team JSON file as the only pipeline (DUET_TEAM)")
    serve.add_argument("--model-name", help="served model name (DUET_MODEL_NAME, default duet)")
    serve.add_argument("--reasoning-output", choices=["reasoning_content", "think", "hidden"], help="DUET_REASONING_OUTPUT")
    serve.add_argument("--workers", help="server processes on the port: a number, or auto for the usable cores (DUET_WORKERS, default 1)")
    serve.set_defaults(handler=_serve)

    export = commands.add_parser("export-team", help="write a pipeline as an AutoGen team component (for AutoGen Studio)")
    export.add_argument("--config", help="YAML file with pipelines (default: the DUET_* environment)")
    export.add_argument("--pipeline", help="pipeline name (default: the first)")
    export.add_argument("--tools", help="JSON file with an OpenAI 'tools' list to include as client (proxy) tools")
    export.add_argument("--studio", action="store_true", help="list tools under each agent's 'tools' (what Studio's UI shows)")
    export.add_argument("-o", "--output", help="output file (default: stdout)")
    export.set_defaults(handler=_export_team)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.handler(args)


if __name__ == "__main__":
    main()
