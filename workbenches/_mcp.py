"""MCP servers as service tools, through autogen-ext's ``McpWorkbench`` (their YAML settings:
:mod:`duet.workbenches._mcp_settings`).

An :class:`McpServer` owns one server for the life of the service: started at startup (its tool
list is read then), stopped at shutdown. When a call fails and the server no longer answers, the
server is reported (logged, and shown by ``/health``) and restarted in the background; calls made
meanwhile fail at once with an error the model reads. Each of its tools is an :class:`McpServerTool`
in the shared workbench, so the answer agent calls them like any other tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Literal, Mapping

from autogen_core import CancellationToken, Component
from autogen_core.tools import BaseTool, ParametersSchema, ToolResult, ToolSchema
from autogen_ext.tools.mcp import McpServerParams, McpWorkbench, StdioServerParams, StreamableHttpServerParams
from pydantic import BaseModel, Field, TypeAdapter
from typing_extensions import Self

from duet._errors import DuetError
from duet.workbenches._http_settings import expand_env
from duet.workbenches._mcp_settings import SHARED_SERVERS
from duet.workbenches._proxy_tool import ProxyToolArgs

logger = logging.getLogger(__name__)

_PARAMS = TypeAdapter(McpServerParams)


class McpServerUnavailable(DuetError, RuntimeError):
    """The server is down (and being restarted)."""


class McpServer:
    """One supervised MCP server."""

    def __init__(self, name: str, params: McpServerParams, *, restart_delay: float = 1.0) -> None:
        self.name = name
        self.params = params
        self._restart_delay = restart_delay
        self._workbench: McpWorkbench | None = None
        self._tools: list[ToolSchema] = []
        self._restarting: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self.last_error: str | None = None
        self.restarts = 0

    @property
    def status(self) -> Literal["running", "restarting", "stopped"]:
        if self._restarting is not None and not self._restarting.done():
            return "restarting"
        return "running" if self._workbench is not None else "stopped"

    async def start(self) -> list[ToolSchema]:
        """Starts the server and reads its tools. Raises if it cannot start."""
        # ${ENV_VAR} references are expanded only here: the parameters a team file keeps stay references.
        params = self.params
        if isinstance(params, StdioServerParams) and params.env:
            params = params.model_copy(update={"env": expand_env(params.env)})
        elif isinstance(params, StreamableHttpServerParams) and params.headers:
            params = params.model_copy(update={"headers": expand_env(params.headers)})
        workbench = McpWorkbench(params)
        try:
            await workbench.start()
            self._tools = await workbench.list_tools()
        except BaseException:
            with contextlib.suppress(Exception):
                await workbench.stop()
            raise
        self._workbench = workbench
        return self._tools

    async def stop(self) -> None:
        if self._restarting is not None:
            self._restarting.cancel()
            with contextlib.suppress(BaseException):
                await self._restarting
        workbench, self._workbench = self._workbench, None
        if workbench is not None:
            with contextlib.suppress(Exception):
                await workbench.stop()

    def tools(self) -> list["McpServerTool"]:
        return [McpServerTool(self, schema) for schema in self._tools]

    async def call(self, tool: str, arguments: Mapping[str, Any], cancellation_token: CancellationToken, call_id: str | None) -> ToolResult:
        if self._workbench is None:
            if self.status == "restarting":
                raise McpServerUnavailable(f"MCP server {self.name!r} is unavailable (restarting after: {self.last_error})")
            await self._start_lazily()
        workbench = self._workbench
        assert workbench is not None
        # McpWorkbench (autogen-ext 0.7.5) links a coroutine to the token it is given, and cancelling
        # that token then raises inside CancellationToken.cancel(), skipping the request's other
        # callbacks. It gets a token of its own; the request's token cancels the call from outside.
        call = asyncio.ensure_future(workbench.call_tool(tool, arguments, CancellationToken(), call_id))
        cancellation_token.link_future(call)
        result = await call
        if result.is_error and not await _alive(workbench):
            error = result.to_text().strip() or "the connection to the server is closed"
            if self._workbench is workbench:  # the first call to notice reports it
                self._report_death(workbench, error)
            raise McpServerUnavailable(f"MCP server {self.name!r} stopped answering: {error}")
        return result

    async def _start_lazily(self) -> None:
        """A tool loaded from a team file meets its server first on its first call."""
        async with self._starting:
            if self._workbench is not None:
                return
            try:
                await self.start()
            except Exception as exc:  # becomes the tool's error
                raise McpServerUnavailable(f"MCP server {self.name!r} could not start: {exc}") from exc

    def _report_death(self, dead: McpWorkbench, error: str) -> None:
        self.last_error = error.strip()
        logger.error("MCP server %r died (%s); restarting it", self.name, self.last_error)
        self._workbench = None
        self._restarting = asyncio.get_running_loop().create_task(self._restart(dead))

    async def _restart(self, dead: McpWorkbench | None) -> None:
        if dead is not None:
            with contextlib.suppress(Exception):
                await dead.stop()
        delay = self._restart_delay
        while True:
            await asyncio.sleep(delay)
            try:
                await self.start()
            except Exception as exc:  # noqa: BLE001 - retried with backoff, reported each time
                self.last_error = str(exc)
                logger.error("MCP server %r failed to restart: %s", self.name, exc)
                delay = min(delay * 2, 30.0)
                continue
            self.restarts += 1
            logger.warning("MCP server %r restarted", self.name)
            return


async def _alive(workbench: McpWorkbench) -> bool:
    try:
        await asyncio.wait_for(workbench.list_tools(), timeout=5)
    except Exception:  # noqa: BLE001 - any failure means the session is gone
        return False
    return True


def shared_server(name: str, params: McpServerParams) -> McpServer:
    """The server of tools loaded from a team file: one per set of parameters."""
    key = _PARAMS.dump_json(params).decode()
    server = SHARED_SERVERS.get(key)
    if server is None:
        server = SHARED_SERVERS[key] = McpServer(name, params)
    return server


class McpServerToolConfig(BaseModel):
    server_name: str
    server_params: McpServerParams
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class McpServerTool(BaseTool[ProxyToolArgs, ToolResult], Component[McpServerToolConfig]):
    """One tool of an MCP server; its schema is the server's, as the server gave it."""

    component_type = "tool"
    component_config_schema = McpServerToolConfig
    component_provider_override = "duet.workbenches.McpServerTool"

    def __init__(self, server: McpServer, schema: ToolSchema) -> None:
        self._server = server
        super().__init__(ProxyToolArgs, ToolResult, schema["name"], schema.get("description", ""))
        no_parameters: ParametersSchema = {"type": "object", "properties": {}}
        self._schema: ToolSchema = {
            "name": schema["name"],
            "description": schema.get("description", ""),
            "parameters": schema.get("parameters", no_parameters),
        }

    @property
    def schema(self) -> ToolSchema:
        return self._schema

    @property
    def server(self) -> McpServer:
        return self._server

    async def run(self, args: ProxyToolArgs, cancellation_token: CancellationToken) -> ToolResult:
        result = await self._server.call(self.name, args.model_dump(), cancellation_token, None)
        if result.is_error:
            raise RuntimeError(result.to_text())
        return result

    def return_value_as_string(self, value: Any) -> str:
        return value.to_text() if isinstance(value, ToolResult) else str(value)

    def _to_config(self) -> McpServerToolConfig:
        return McpServerToolConfig(
            server_name=self._server.name,
            server_params=self._server.params,
            name=self.name,
            description=self._schema.get("description", ""),
            input_schema=dict(self._schema.get("parameters", {})),
        )

    @classmethod
    def _from_config(cls, config: McpServerToolConfig) -> Self:
        server = shared_server(config.server_name, config.server_params)
        return cls(server, {"name": config.name, "description": config.description, "parameters": config.input_schema})  # type: ignore[typeddict-item]
