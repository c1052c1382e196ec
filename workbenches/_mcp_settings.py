"""What of MCP needs no MCP library: a server as the YAML describes it, and the servers that tools
loaded from team files share (stopped at shutdown). The servers themselves
(:mod:`duet.workbenches._mcp`, which imports ``mcp``) load only when a pipeline uses one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from autogen_ext.tools.mcp import McpServerParams

    from duet.workbenches._mcp import McpServer


class McpServerSettings(BaseModel):
    """An MCP server in the YAML: ``command`` (+ ``args``, ``env``) for stdio, or ``url`` for streamable HTTP."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: Optional[str] = None
    args: list[str] = Field(default_factory=list)
    env: Optional[dict[str, str]] = Field(None, description="Values may use ${ENV_VAR}.")
    cwd: Optional[str] = None
    url: Optional[str] = None
    headers: Optional[dict[str, str]] = Field(None, description="Values may use ${ENV_VAR}.")
    timeout: float = Field(30.0, description="Seconds a call may take.")

    def params(self) -> McpServerParams:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give either 'command' (stdio) or 'url' (streamable HTTP)")
        from autogen_ext.tools.mcp import StdioServerParams, StreamableHttpServerParams  # imports mcp: a pipeline with MCP only

        if self.command is not None:
            return StdioServerParams(command=self.command, args=self.args, env=self.env, cwd=self.cwd, read_timeout_seconds=self.timeout)
        return StreamableHttpServerParams(url=self.url, headers=self.headers, timeout=self.timeout)


SHARED_SERVERS: dict[str, McpServer] = {}
"""The servers of MCP tools loaded from team files, one per set of parameters (their JSON)."""


async def stop_shared_servers() -> None:
    """Stops the servers team files' tools started (none unless a team file brought MCP tools)."""
    servers = list(SHARED_SERVERS.values())
    SHARED_SERVERS.clear()
    for server in servers:
        await server.stop()
