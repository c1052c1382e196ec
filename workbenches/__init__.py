"""Tools and the workbench the two agents share.

Public API:

- :class:`ProxyTool` — a client's OpenAI tool schema as an AutoGen tool (schema passed through verbatim);
- :class:`DuetWorkbench` — the shared ``StaticStreamWorkbench``: client tools beside service tools;
- :func:`model_safe_name` — the alias a model sees for a tool name OpenAI would reject;
- :func:`proxy_tools_from_openai` — ``ProxyTool`` objects from an OpenAI ``tools`` list.
"""

from .duet_workbench import DuetWorkbench, DuetWorkbenchConfig
from .proxy_tool import ClientSideToolError, ProxyTool, ProxyToolArgs, ProxyToolConfig, model_safe_name
from .tool_schemas import proxy_tools_from_openai

__all__ = [
    "ClientSideToolError",
    "DuetWorkbench",
    "DuetWorkbenchConfig",
    "ProxyTool",
    "ProxyToolArgs",
    "ProxyToolConfig",
    "model_safe_name",
    "proxy_tools_from_openai",
]
