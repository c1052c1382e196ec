"""Tools and the workbench the two agents share.

Public API:

- :class:`DuetWorkbench` — the shared ``StaticStreamWorkbench``: client tools beside service tools;
- client tools: :class:`ProxyTool` (a client's schema, passed through verbatim; running one here is a
  :class:`ClientSideToolError`), :func:`proxy_tools_from_openai` (built once per distinct entry and
  list: :class:`ContentCache`, :func:`content_key`), :func:`model_safe_name` (the alias a model sees
  for a name OpenAI would reject), :func:`parameters_problem` and :func:`json_schema_problem` (what an
  upstream would refuse in a tool's or a response format's schema), :class:`CachingToolSchema` and
  :func:`derived_from` (what readers derive from a client tool's schema, derived once);
- service tools: :func:`service_tool` and :class:`PythonFunctionTool` (Python functions, by import
  path), :class:`McpServer` / :class:`McpServerTool` (MCP servers; a server that is down:
  :class:`McpServerUnavailable`; :func:`stop_shared_servers` when the process ends),
  :class:`HttpServiceTool` (HTTP endpoints), :class:`ServiceTools` (a pipeline's set);
- their settings (the YAML ``tools:`` section): :class:`ToolsSettings`, of :class:`FunctionToolSettings`,
  :class:`McpServerSettings` and :class:`HttpToolSettings`;
- :class:`RequestContext` — what a service tool's ``_context`` parameter receives (the request's workbench
  hands it to the tool).

The MCP servers and tools (``mcp``) and the HTTP tool (``httpx``) are imported on first use of their
names, so a service whose pipelines use neither does not load those libraries.
"""

import importlib
from typing import Any

from duet.workbenches._context import RequestContext
from duet.workbenches._workbench import DuetWorkbench
from duet.workbenches._functions import PythonFunctionTool, service_tool
from duet.workbenches._http_settings import HttpToolSettings
from duet.workbenches._mcp_settings import McpServerSettings, stop_shared_servers
from duet.workbenches._proxy_tool import CachingToolSchema, ClientSideToolError, ProxyTool, derived_from, model_safe_name
from duet.workbenches._parameter_schemas import json_schema_problem, parameters_problem
from duet.workbenches._service_tools import FunctionToolSettings, ServiceTools, ToolsSettings
from duet.workbenches._tool_schemas import ContentCache, content_key, proxy_tools_from_openai

__all__ = [
    "CachingToolSchema",
    "ClientSideToolError",
    "ContentCache",
    "DuetWorkbench",
    "FunctionToolSettings",
    "HttpServiceTool",
    "HttpToolSettings",
    "McpServer",
    "McpServerSettings",
    "McpServerTool",
    "McpServerUnavailable",
    "ProxyTool",
    "PythonFunctionTool",
    "RequestContext",
    "ServiceTools",
    "ToolsSettings",
    "content_key",
    "derived_from",
    "json_schema_problem",
    "model_safe_name",
    "parameters_problem",
    "proxy_tools_from_openai",
    "service_tool",
    "stop_shared_servers",
]

_IMPORTED_ON_USE = {
    "HttpServiceTool": "._http_tools",
    "McpServer": "._mcp",
    "McpServerTool": "._mcp",
    "McpServerUnavailable": "._mcp",
}


def __getattr__(name: str) -> Any:
    module = _IMPORTED_ON_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next lookup finds it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
