"""The ``duet`` command: ``duet serve``, ``duet check`` and ``duet export-team``.

A configuration error ends each command with one line on stderr that names the flag, the
``DUET_*`` variable or the file at fault (:class:`~duet.api._settings.ConfigError`), never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Sequence

if TYPE_CHECKING:
    from duet.api._app import ServiceConfig
    from duet.api._settings import EnvSettings


def _import_from_working_directory() -> None:
    """Function tools are named by import path (``mytools:lookup``): like uvicorn and gunicorn,
    look for them in the directory the command runs in."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def given_flags(args: argparse.Namespace, *names: str) -> dict[str, object]:
    """The flags the command line set, as :class:`~duet.api._settings.EnvSettings` arguments: the
    settings' first source, so a flag wins over its ``DUET_*`` variable and the YAML file."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


SERVE_FLAGS = ("config", "team", "model_name", "reasoning_output", "host", "port", "workers")
"""The flags of ``duet serve``, each the name of an :class:`~duet.api._settings.EnvSettings` field."""
CHECK_FLAGS = ("config", "team", "model_name", "reasoning_output", "workers")
"""The flags of ``duet check``: what it serves, not where."""



def refuse(command: str, message: str, code: int = 2) -> NoReturn:
    """Ends the command with one line on stderr."""
    print(f"duet: {command}: {message}", file=sys.stderr)
    raise SystemExit(code)


def resolve(args: argparse.Namespace, flags: Sequence[str]) -> tuple["EnvSettings", "ServiceConfig"]:
    """The settings and what they serve, from the flags, the ``DUET_*`` variables and the YAML file.
    Raises :class:`~duet.api._settings.ConfigError`."""
    from duet.api._app import ServiceConfig
    from duet.api._settings import load_settings

    env = load_settings(given_flags(args, *flags))
    return env, ServiceConfig.from_env(env)


def announce(config: "ServiceConfig", workers: int) -> None:
    """The startup summary and the warnings, in the log (once, from the process that starts the
    workers); then, without holding the start up, what the upstreams say (one warning each that cannot serve)."""
    from duet.api._settings import unknown_variables
    from duet.api.server._startup import summary, unset_keys, upstream_problems

    logger = logging.getLogger("duet")
    for line in summary(config, workers):
        logger.info("%s", line)
    for warning in [*unset_keys(config), *unknown_variables()]:
        logger.warning("%s", warning)

    def ask_upstreams() -> None:
        for problem in upstream_problems(config):
            logger.warning("%s", problem)

    threading.Thread(target=ask_upstreams, name="duet-upstream-check", daemon=True).start()


def _serve(args: argparse.Namespace) -> None:
    _import_from_working_directory()
    from duet.api._app import create_app
    from duet.api.server._process import start_process
    from duet.api.server._server import serve
    from duet.api.server._workers import Supervisor, WorkerSpec, listen

    try:
        env, config = resolve(args, SERVE_FLAGS)
        start_process(env.log_level, env.log_format)
        app = create_app(config)  # builds every pipeline: fails before binding the port (once, for every worker)
        announce(config, env.workers)
    except Exception as exc:  # noqa: BLE001 - a ConfigError, or a state store that cannot open: one line, then exit
        refuse("cannot start", str(exc) or type(exc).__name__)
    if env.workers == 1:
        serve(app, config.options, app.state.gate, host=env.host, port=env.port, log_level=env.log_level.lower())
        return
    del app  # it proved the configuration builds; each worker builds its own
    try:
        listener = listen(env.host, env.port)
    except OSError as exc:
        refuse("cannot start", f"cannot listen on {env.host}:{env.port}: {exc}")
    spec = WorkerSpec(config, env.host, env.port, env.log_level.lower())
    raise SystemExit(Supervisor(spec, listener, env.workers).run())


def _tools_file(path: str) -> list[Any]:
    """``duet export-team --tools``: the client tools of a JSON file (an OpenAI ``tools`` list, or an
    object that holds one), as proxy tools; a file that is not one ends the command."""
    from duet.workbenches import proxy_tools_from_openai

    try:
        data = json.loads(Path(path).read_text())
        return proxy_tools_from_openai(data["tools"] if isinstance(data, dict) else data)
    except OSError as exc:
        refuse("export-team", f"{path}: cannot read the tools file: {exc.strerror or exc}")
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, or not an OpenAI 'tools' list
        refuse("export-team", f"{path}: expected JSON with an OpenAI 'tools' list: {exc}")


def _export_team(args: argparse.Namespace) -> None:
    _import_from_working_directory()
    from duet.agents import PipelineSettings, export_team
    from duet.workbenches import ServiceTools

    from duet.api._settings import ConfigError

    try:
        config = resolve(args, ("config",))[1]
    except ConfigError as exc:
        refuse("export-team", str(exc))
    pipelines = config.pipelines
    chosen = next((p for p in pipelines if args.pipeline in (None, p.name)), None)
    if chosen is None:
        refuse("export-team", f"no pipeline named {args.pipeline!r}; there are: {', '.join(p.name for p in pipelines)}")
    if not isinstance(chosen, PipelineSettings):
        refuse("export-team", f"pipeline {chosen.name!r} is already a team file")
    tools = _tools_file(args.tools) if args.tools else []

    async def export() -> dict[str, object]:
        services = ServiceTools.from_settings(chosen.tools)
        await services.open()  # MCP servers are asked for their tool lists
        try:
            return export_team(chosen, client_tools=tools, service_tools=services.tools, studio=args.studio)
        finally:
            await services.close()

    try:
        document = asyncio.run(export())
    except Exception as exc:  # noqa: BLE001 - a function tool that does not import, an MCP server that does not start
        refuse("export-team", f"{config.origin_of(chosen)}: {exc}")
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)


def _check(args: argparse.Namespace) -> None:
    """``duet check``: the summary and the warnings on stdout, then ``ok`` (exit 0) or why not (exit 1)."""
    _import_from_working_directory()
    from duet.api._settings import ConfigError, unknown_variables
    from duet.api.server._startup import check, summary, unset_keys

    # Python warnings (an old team file's) as one line each, as the command's own.
    warnings.showwarning = lambda message, category, *_: print(f"warning: {message}")
    try:
        env, config = resolve(args, CHECK_FLAGS)
        for line in summary(config, env.workers):
            print(line)
        for warning in unset_keys(config):
            print(f"warning: {warning}")
        unknown = unknown_variables()
        if unknown:  # serve only warns; a check is where a typo must stop the deploy
            refuse("check", "; ".join(unknown), code=1)
        ready, checks = asyncio.run(check(config, probe=args.probe))
    except ConfigError as exc:
        refuse("check", str(exc), code=1)
    for name, state in checks.items():
        print(f"{name}: {json.dumps(state) if isinstance(state, dict) else state}")
    if not ready:
        refuse("check", "not ready: " + ", ".join(name for name, state in checks.items() if state != "ok"), code=1)
    print("configuration ok" + (", upstreams answering" if args.probe else ""))


def variables_help() -> str:
    """Every ``DUET_*`` variable with its description and default, from the settings (their one home)."""
    from pydantic_core import PydanticUndefined

    from duet.api._settings import KEY_VARIABLES, EnvSettings

    lines = ["environment variables (a flag wins over its variable, a variable over the YAML file):"]
    for name, field in EnvSettings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = "" if default in (None, PydanticUndefined, "", []) else f" (default {default})"
        lines.append(f"  DUET_{name.upper():<28} {field.description or ''}{shown}".rstrip())
    lines += [f"  {name:<33} the {part} model's API key (default pipeline; only ever read from the environment)"
              for part, name in KEY_VARIABLES.items()]
    return "\n".join(lines)


def _add_pipeline_flags(command: argparse.ArgumentParser) -> None:
    """The flags that say what is served (``duet serve`` and ``duet check``)."""
    command.add_argument("--config", help="YAML file with pipelines (DUET_CONFIG)")
    command.add_argument("--team", help="serve this team JSON file as the only pipeline (DUET_TEAM)")
    command.add_argument("--model-name", help="served model name (DUET_MODEL_NAME, default duet)")
    command.add_argument("--reasoning-output", choices=["reasoning_content", "think", "hidden"], help="DUET_REASONING_OUTPUT")
    command.add_argument("--workers", help="server processes on the port: a number, or auto for the usable cores (DUET_WORKERS, default 1)")


class _CommandParser(argparse.ArgumentParser):
    """A command whose help ends with text made only when the help is shown (the variables' list
    imports the settings, which ``duet --version`` and every other command need not wait for)."""

    epilog_factory: Callable[[], str] | None = None

    def format_help(self) -> str:
        if self.epilog_factory is not None and self.epilog is None:
            self.epilog = self.epilog_factory()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    """The ``duet`` command line; each command's handler is its ``handler`` default."""
    parser = argparse.ArgumentParser(prog="duet", description="A reasoning model and an answer model behind one OpenAI-compatible endpoint.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('autogen-duet')}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)

    serve = commands.add_parser("serve", help="run the OpenAI-compatible service", formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.epilog_factory = variables_help
    serve.add_argument("--host", help="interface to bind (DUET_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (DUET_PORT, default 8000)")
    _add_pipeline_flags(serve)
    serve.set_defaults(handler=_serve)

    check = commands.add_parser("check", help="validate the configuration without serving (exit 0 ok, 1 not)",
                                description="Builds every pipeline as `duet serve` would (imports function tools, loads "
                                            "team files) and prints the startup summary; --probe also starts the MCP "
                                            "servers and asks the state store and each upstream's /models.")
    _add_pipeline_flags(check)
    check.add_argument("--probe", action="store_true", help="also ask the upstreams, MCP servers and state store")
    check.set_defaults(handler=_check)

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

