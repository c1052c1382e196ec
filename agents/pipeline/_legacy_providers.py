"""Team files exported before Duet's packages moved under ``duet.`` (Duet 0.1.0's exports) name
providers such as ``agents.ReasoningAgent``; this maps them to the current names (the one home of that
mapping), and says so with an :class:`OldTeamFileWarning`. ``duet serve`` and ``duet check`` turn
that warning into one line of their output (the process that starts the workers says it once)."""

import warnings
from typing import Any

from duet.workbenches import DuetWorkbench, ProxyTool, PythonFunctionTool

from duet.agents._answer_agent import AnswerAgent
from duet.agents.upstream import OpenAICompatibleClient
from duet.agents._reasoning_agent import ReasoningAgent

_COMPONENTS = (ReasoningAgent, AnswerAgent, OpenAICompatibleClient, DuetWorkbench, ProxyTool, PythonFunctionTool)
# Components whose modules load libraries only the pipelines that use them need (mcp, httpx): named,
# not imported; (provider, module path). tests/unit/test_lazy_imports.py checks them against the classes.
NAMED_COMPONENTS = (
    ("duet.workbenches.McpServerTool", "duet.workbenches._mcp.McpServerTool"),
    ("duet.workbenches.HttpServiceTool", "duet.workbenches._http_tools.HttpServiceTool"),
)


def _legacy_names(current: str, full_path: str) -> dict[str, str]:
    """Both old spellings a dump could hold: the short provider and the full module path."""
    return {current.removeprefix("duet."): current, full_path.removeprefix("duet."): current}


LEGACY_PROVIDERS: dict[str, str] = {
    old: new
    for current, full_path in (
        *((c.component_provider_override, f"{c.__module__}.{c.__qualname__}") for c in _COMPONENTS),
        *NAMED_COMPONENTS,
    )
    for old, new in _legacy_names(current, full_path).items()
}


class OldTeamFileWarning(FutureWarning):
    """A team file names Duet's components by their old top-level names (``agents.AnswerAgent``): it
    loads as ``duet.*``; re-exported with ``duet export-team``, it says nothing."""


def with_current_providers(tree: Any, origin: str = "") -> Any:
    """The component tree (a dumped ``ComponentModel``) with every legacy provider renamed, warning
    once per tree (``origin``: the file it came from); only Duet's own names are touched (a user's
    ``agents.X`` stays)."""
    renamed: set[str] = set()

    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(item) for item in node]
        if not isinstance(node, dict):
            return node
        result = {key: rename(value) for key, value in node.items()}
        provider = result.get("provider")
        if isinstance(provider, str) and provider in LEGACY_PROVIDERS and "config" in result:
            renamed.add(provider)
            result["provider"] = LEGACY_PROVIDERS[provider]
        return result

    upgraded = rename(tree)
    if renamed:
        warnings.warn(f"team file {origin + ' ' if origin else ''}names providers by their old top-level names "
                      f"({', '.join(sorted(renamed))}); loaded as duet.*, re-export it with `duet export-team` to drop "
                      "this warning", OldTeamFileWarning, stacklevel=3)
    return upgraded
