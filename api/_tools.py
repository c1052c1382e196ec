"""What the three protocols' readers share about a request's tools."""

from __future__ import annotations

from typing import AbstractSet

from duet.api._errors import APIError
from duet.workbenches import ProxyTool, model_safe_name


def tool_choice_alias(name: str, tools: list[ProxyTool], service_tool_names: AbstractSet[str], param: str) -> str:
    """The model-facing name of the tool a ``tool_choice`` names; 400 if it is not among the tools."""
    alias = model_safe_name(name)
    if alias not in {t.name for t in tools} | service_tool_names:
        raise APIError(400, f"{param} names '{name[:100]}', which is not among the tools", param=param)
    return alias
