"""A pipeline's service tools: Python functions, MCP servers and HTTP tools, held for the service's life."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from autogen_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field

from duet.workbenches._functions import DEFAULT_TIMEOUT, PythonFunctionTool, function_tools
from duet.workbenches._http_settings import HttpToolSettings
from duet.workbenches._mcp_settings import McpServerSettings

if TYPE_CHECKING:
    from duet.workbenches._mcp import McpServer

logger = logging.getLogger(__name__)


class FunctionToolSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    function: str = Field(description="'package.module:function', or 'package.module' for every @service_tool in it.")
    name: Optional[str] = None
    description: Optional[str] = None
    timeout: Optional[float] = None


class ToolsSettings(BaseModel):
    """The ``tools`` section of a pipeline."""

    model_config = ConfigDict(extra="forbid")

    functions: list[Union[str, FunctionToolSettings]] = Field(default_factory=list)
    mcp: list[McpServerSettings] = Field(default_factory=list)
    http: list[HttpToolSettings] = Field(default_factory=list)
    timeout: float = Field(DEFAULT_TIMEOUT, description="Default timeout of a Python function tool, in seconds.")


class ServiceTools:
    """The tools one pipeline runs itself. Function and HTTP tools exist at once; MCP servers are
    started by :meth:`open` (their tool lists come from the servers) and stopped by :meth:`close`."""

    def __init__(self, tools: Sequence[BaseTool[Any, Any]] = (), servers: Sequence[McpServer] = ()) -> None:
        self._static = list(tools)
        self._servers = list(servers)
        # A team file brings MCP tools whose servers must be started too.
        for tool in self._static:
            server = _mcp_server_of(tool)
            if server is not None and server not in self._servers:
                self._servers.append(server)
        self._server_tools: list[BaseTool[Any, Any]] = []
        self._tools_changed()

    def _tools_changed(self) -> None:
        # What every request reads, made when the tools change, not per request.
        self._all: tuple[BaseTool[Any, Any], ...] = (*self._static, *self._server_tools)
        self._names = frozenset(tool.name for tool in self._all)

    @classmethod
    def from_settings(cls, settings: ToolsSettings) -> "ServiceTools":
        tools: list[BaseTool[Any, Any]] = []
        for entry in settings.functions:
            if isinstance(entry, str):
                tools += function_tools(entry, default_timeout=settings.timeout)
            elif ":" in entry.function:
                tools.append(PythonFunctionTool(entry.function, name=entry.name, description=entry.description,
                                                timeout=entry.timeout, default_timeout=settings.timeout))
            else:
                tools += function_tools(entry.function, default_timeout=entry.timeout or settings.timeout)
        tools += [http.build() for http in settings.http]
        servers: list[McpServer] = []
        if settings.mcp:
            from duet.workbenches._mcp import McpServer  # the MCP library loads only for a pipeline with MCP servers

            servers = [McpServer(server.name, server.params()) for server in settings.mcp]
        return cls(tools, servers)

    @property
    def tools(self) -> Sequence[BaseTool[Any, Any]]:
        return self._all

    @property
    def names(self) -> frozenset[str]:
        """The names of :attr:`tools`."""
        return self._names

    async def open(self) -> None:
        """Starts the MCP servers (raising if one cannot start) and adds their tools."""
        static_names = {tool.name for tool in self._static}
        for server in self._servers:
            if server.status == "running":
                continue
            schemas = await server.start()
            logger.info("MCP server %r started with tools: %s", server.name, ", ".join(s["name"] for s in schemas))
            self._server_tools += [tool for tool in server.tools() if tool.name not in static_names]
            self._tools_changed()

    async def close(self) -> None:
        for server in self._servers:
            await server.stop()

    def status(self) -> dict[str, Any]:
        return {
            server.name: {"status": server.status, "restarts": server.restarts, "last_error": server.last_error}
            for server in self._servers
        }


def _mcp_server_of(tool: BaseTool[Any, Any]) -> McpServer | None:
    """The server of an MCP tool; None for any other tool. An MCP tool exists only once its module
    (and the MCP library) is imported; until then nothing is imported to ask."""
    mcp = sys.modules.get(f"{__package__}._mcp")
    return tool.server if mcp is not None and isinstance(tool, mcp.McpServerTool) else None
