"""Team files: a team component read from JSON (old provider names mapped), loaded, and diagnosed
when it does not load (the error names the provider that broke)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Iterator, Mapping

from autogen_agentchat.base import Team
from autogen_core import ComponentLoader, ComponentModel
from autogen_core.tools import BaseTool

from duet.workbenches import DuetWorkbench

from duet.agents._answer_agent import AnswerAgent, AnswerAgentConfig
from duet.agents._base import workbench_from_config
from duet.agents._errors import TeamLoadError
from duet.agents.pipeline._legacy_providers import with_current_providers


def load_team_config(team: ComponentModel | Mapping[str, Any] | str | Path) -> ComponentModel:
    """A team component from a ``ComponentModel``, a dict, or the path of a JSON file; providers
    under Duet's old top-level names (``agents.ReasoningAgent``) are renamed, with a warning."""
    origin = ""
    if isinstance(team, ComponentModel):
        team = team.model_dump()
    if isinstance(team, (str, Path)):
        origin = str(team)
        try:
            team = json.loads(Path(team).read_text())
        except (OSError, ValueError) as exc:
            raise TeamLoadError(f"cannot read team file {team}: {exc}") from exc
    try:
        return ComponentModel.model_validate(with_current_providers(team, origin))
    except ValueError as exc:
        raise TeamLoadError(f"not a component: {exc}") from exc


def load_team(config: ComponentModel, origin: str = "component") -> Team:
    """Loads a team; on failure the error names the provider path that broke."""
    try:
        return Team.load_component(config)
    except Exception as exc:
        raise TeamLoadError(f"cannot load team {origin}: {diagnose(config, exc)}") from exc


def _components(node: Any) -> Iterator[dict[str, Any]]:
    """Every component in a dumped tree, innermost first."""
    if isinstance(node, dict):
        for value in node.values():
            yield from _components(value)
        if "provider" in node and "config" in node:
            yield node
    elif isinstance(node, list):
        for item in node:
            yield from _components(item)


def diagnose(config: ComponentModel, error: Exception) -> str:
    tree = config.model_dump()
    for component in _components(tree):
        module_path, _, class_name = component["provider"].rpartition(".")
        try:
            getattr(importlib.import_module(module_path), class_name)
        except Exception as exc:  # noqa: BLE001 - the report is the point
            return f"provider '{component['provider']}' ({component.get('component_type')}) cannot be imported: {exc}"
    for component in _components(tree):
        try:
            ComponentLoader.load_component(component)
        except Exception as exc:  # noqa: BLE001
            return f"provider '{component['provider']}' ({component.get('component_type')}) failed to load: {type(exc).__name__}: {exc}"
    return f"{type(error).__name__}: {error}"


def service_tools_of(team: ComponentModel) -> list[BaseTool[Any, Any]]:
    """The tools a served team file brings itself: its answer agent's non-client tools, loaded
    once for the pipeline (client tools come from each request instead)."""
    for participant in team.config.get("participants", []):
        if ComponentModel.model_validate(participant).provider == AnswerAgent.component_provider_override:
            workbench = workbench_from_config(AnswerAgentConfig.model_validate(participant["config"]))
            if isinstance(workbench, DuetWorkbench):
                return workbench.service_tools
    return []
