"""What an operator sees before the first request: the startup summary (what each pipeline calls,
the state store, auth, workers), warnings for upstream keys that are named but unset, and the
checks of ``duet check`` (the configuration built, and with ``--probe`` the upstreams, MCP servers
and state store asked), all from the settings ``duet serve`` resolves."""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import urlsplit

from duet.agents import PipelineSettings
from duet.agents.continuations import open_store
from duet.agents import ModelSettings

from duet.api._app import ServiceConfig
from duet.api._health import Readiness
from duet.api._settings import KEY_VARIABLES, TeamPipelineSettings

def _model(part: str, settings: ModelSettings) -> str:
    return f"{part} {settings.model} at {settings.base_url}"


def _tools(pipeline: PipelineSettings) -> str:
    tools = pipeline.tools
    names = [entry if isinstance(entry, str) else entry.function for entry in tools.functions]
    names += [f"mcp:{server.name}" for server in tools.mcp]
    names += [f"http:{http.name}" for http in tools.http]
    return ", ".join(names) or "none"


def summary(config: ServiceConfig, workers: int) -> list[str]:
    """One line per pipeline, then the state store, auth and workers."""
    lines = []
    for pipeline in config.pipelines:
        if isinstance(pipeline, TeamPipelineSettings):
            described = f"team file {pipeline.team_file}"
        else:
            parts = [_model("reasoner", pipeline.reasoner)] if pipeline.reasoner else ["no reasoner"]
            parts += [_model("answer", pipeline.answer), f"service tools: {_tools(pipeline)}"]
            described = "; ".join(parts)
        lines.append(f"pipeline {pipeline.name!r}: {described}; reasoning output {pipeline.reasoning_output}")
    store = urlsplit(config.state_url)
    # A Redis URL may carry a password: only its scheme, host and path are shown.
    shown = f"{store.scheme}://{store.hostname or ''}{f':{store.port}' if store.port else ''}{store.path}"
    lines.append(f"state store: {shown}")
    lines.append(f"auth: {'on' if config.api_keys else 'off'} ({len(config.api_keys)} API keys)")
    lines.append(f"workers: {workers}")
    return lines


def unset_keys(config: ServiceConfig) -> list[str]:
    """A warning for each upstream whose key variable is named but unset or empty. The ``DUET_*``
    pipeline always names its two, which a local server (Ollama) does not need: those warn only for
    an https upstream (a hosted API)."""
    warnings = []
    for pipeline in config.pipelines:
        if isinstance(pipeline, TeamPipelineSettings):
            continue
        parts = [("reasoner", pipeline.reasoner), ("answer", pipeline.answer)]
        for part, settings in parts:
            name = settings.api_key_env if settings else None
            if settings is None or not name or os.environ.get(name):
                continue
            if name in KEY_VARIABLES.values() and urlsplit(settings.base_url).scheme != "https":
                continue
            warnings.append(f"pipeline {pipeline.name!r}: the {part}'s key variable {name} is not set: "
                            f"{settings.base_url} will likely refuse its requests")
    return warnings


async def check(config: ServiceConfig, probe: bool) -> tuple[bool, dict[str, Any]]:
    """Builds every pipeline (a :class:`~duet.api._settings.ConfigError` if one cannot be); with
    ``probe``, also starts the MCP servers and runs the readiness checks with the upstream probe on,
    as ``/health/ready`` would. Returns ``(ready, checks)``."""
    options = config.options.model_copy(update={"ready_probe_upstreams": True})
    store = open_store(options.state_url, timeout=options.store_timeout)
    try:
        pipelines = config.build(store)
        try:
            if not probe:
                return True, {"pipelines": "ok"}
            try:
                for duet in pipelines.values():
                    await duet.open()
            except Exception as exc:  # noqa: BLE001 - an MCP server that cannot start: the check fails
                return False, {"pipelines": "ok", "mcp_servers": str(exc) or type(exc).__name__}
            return await Readiness(pipelines, store, options).check("ok")
        finally:
            await asyncio.gather(*(duet.close() for duet in pipelines.values()), return_exceptions=True)
    finally:
        await store.close()
