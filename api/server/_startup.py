"""What an operator sees before the first request: the startup summary (what each pipeline calls,
the state store, auth, workers), warnings for upstream keys that are named but unset, and the
checks of ``duet check`` (the configuration built, and with ``--probe`` the upstreams, MCP servers
and state store asked), all from the settings ``duet serve`` resolves."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from duet.agents import DEFAULT_BASE_URL, PipelineSettings
from duet.agents.continuations import open_store, redacted_url
from duet.agents import ModelSettings

from duet.api._app import ServiceConfig
from duet.api._errors import what_to_do
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
    lines.append(f"state store: {redacted_url(config.state_url)}")  # a Redis URL may carry a password
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
    store = open_store(options.state_url, timeout=options.store_timeout, failover_wait=options.store_failover_wait)
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
            report = await Readiness(pipelines, store, options).check("ok")
            return report.ready and not report.degraded, report.checks  # a store that cannot be reached fails the check
        finally:
            await asyncio.gather(*(duet.close() for duet in pipelines.values()), return_exceptions=True)
    finally:
        await store.close()


UPSTREAM_PROBE_SECONDS = 3.0


@dataclass(frozen=True)
class Upstream:
    """One upstream server as the configuration names it: its URL, the models asked of it, the
    variables that set it (for the hint), and its key's variable."""

    base_url: str
    models: tuple[str, ...]
    variables: tuple[str, ...]
    api_key_env: str | None


def configured_upstreams(config: ServiceConfig) -> list[Upstream]:
    """Each distinct upstream of the model pipelines (a team file's are its own: not listed)."""
    found: dict[str, Upstream] = {}
    for pipeline in config.pipelines:
        if isinstance(pipeline, TeamPipelineSettings):
            continue
        for part, settings in (("reasoner", pipeline.reasoner), ("answer", pipeline.answer)):
            if settings is None:
                continue
            known = found.get(settings.base_url)
            variable = f"DUET_{part.upper()}_BASE_URL"
            models = (*known.models, settings.model) if known else (settings.model,)
            variables = (*known.variables, variable) if known else (variable,)
            found[settings.base_url] = Upstream(settings.base_url, tuple(dict.fromkeys(models)), tuple(dict.fromkeys(variables)),
                                                (known.api_key_env if known else None) or settings.api_key_env)
    return list(found.values())


def upstream_problem(upstream: Upstream, timeout: float = UPSTREAM_PROBE_SECONDS) -> str | None:
    """Why ``upstream`` cannot serve its models (``GET /models``), with what to do; None if it can."""
    key = os.environ.get(upstream.api_key_env or "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = upstream.base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout, trust_env=False)  # as the model clients: no proxy
    except httpx.HTTPError as exc:
        reason = "no answer" if isinstance(exc, httpx.TimeoutException) else f"{type(exc).__name__}: {exc}"
        return f"the upstream {upstream.base_url} does not answer (GET {url}: {reason}): {what_to_do(upstream.base_url, upstream.models, upstream.variables)}"
    if response.status_code != 200:
        return f"the upstream {upstream.base_url} answers GET {url} with {response.status_code}: check its key ({upstream.api_key_env}) and URL"
    try:
        listed = {entry.get("id") for entry in response.json().get("data", []) if isinstance(entry, dict)}
    except (ValueError, AttributeError):
        return None  # a server that answers, but lists no models the way OpenAI does: the first request will tell
    missing = [model for model in upstream.models if listed and model not in listed]
    if missing and upstream.base_url == DEFAULT_BASE_URL:
        return f"Ollama at {upstream.base_url} has not pulled {', '.join(missing)}: " + " && ".join(f"ollama pull {m}" for m in missing)
    if missing:
        return f"the upstream {upstream.base_url} does not list {', '.join(missing)} among its models"
    return None


def upstream_problems(config: ServiceConfig) -> list[str]:
    """:func:`upstream_problem` of every configured upstream, asked at once."""
    upstreams = configured_upstreams(config)
    if not upstreams:
        return []
    with ThreadPoolExecutor(len(upstreams)) as pool:
        return [problem for problem in pool.map(upstream_problem, upstreams) if problem]
