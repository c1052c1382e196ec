"""The workbench a duet's two agents share."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncGenerator, Mapping, Sequence

from autogen_core import CancellationToken, Component, ComponentModel
from autogen_core.tools import BaseTool, StaticStreamWorkbench, TextResultContent, ToolResult, ToolSchema
from pydantic import BaseModel
from typing_extensions import Self

from duet.workbenches._context import RequestContext
from duet.workbenches._functions import PythonFunctionTool
from duet.workbenches._proxy_tool import ProxyTool
from duet.workbenches._tool_schemas import ClientToolIndex, ClientTools, client_tools_by_name

logger = logging.getLogger(__name__)


class DuetWorkbenchConfig(BaseModel):
    tools: list[ComponentModel] = []


def _unshadowed(tools: list[BaseTool[Any, Any]], client_tools: list[ProxyTool],
                service_tools: list[BaseTool[Any, Any]]) -> tuple[list[BaseTool[Any, Any]], list[BaseTool[Any, Any]]]:
    """``tools`` and ``service_tools`` without the service tools a client tool of the same name shadows."""
    client_names = {tool.name for tool in client_tools}
    shadowed = [tool for tool in service_tools if tool.name in client_names]
    if not shadowed:
        return tools, service_tools
    for tool in shadowed:
        logger.warning("client tool '%s' shadows the service tool of the same name", tool.name)
    return ([tool for tool in tools if all(tool is not other for other in shadowed)],
            [tool for tool in service_tools if tool.name not in client_names])


class DuetWorkbench(StaticStreamWorkbench, Component[DuetWorkbenchConfig]):
    """A ``StaticStreamWorkbench`` that also knows which of its tools belong to the client.

    Client tools (:class:`ProxyTool`) are listed to the model like any other tool; the answer
    agent asks :meth:`client_tool` to decide whether a call goes back to the client or runs here.
    A client tool shadows a service tool of the same name (the client asked for its own tool).

    A request's workbench (:meth:`for_request`) holds the request and hands it to each Python
    function tool it calls (its ``_context`` parameter); any other workbench's tools get an empty
    :class:`RequestContext`.

    >>> wb = DuetWorkbench([ProxyTool("lookup", parameters={"type": "object"})])
    >>> wb.client_tool("lookup").client_name
    'lookup'
    """

    component_provider_override = "duet.workbenches.DuetWorkbench"
    component_config_schema = DuetWorkbenchConfig  # type: ignore[assignment]

    def __init__(self, tools: Sequence[BaseTool[Any, Any]], *, request: RequestContext | None = None) -> None:
        # One look at each tool: a request's workbench holds every client tool (a hundred, for some
        # clients), and isinstance against a tool class (a runtime-checkable protocol) runs Python code.
        client_tools: list[ProxyTool] = []
        service_tools: list[BaseTool[Any, Any]] = []
        for tool in tools:
            (client_tools if _is_client_tool(tool) else service_tools).append(tool)  # type: ignore[arg-type]
        kept = list(tools)
        if service_tools and client_tools:  # a request's common case has one kind or none: nothing to shadow
            kept, service_tools = _unshadowed(kept, client_tools, service_tools)
        super().__init__(tools=kept)
        self._service_tools = service_tools
        self._client_tools = client_tools_by_name(client_tools)
        self._schemas: tuple[ToolSchema, ...] | None = None  # the client tools' own, when they are all the tools
        self._request = request
        self._takes_request = (
            {tool.name: tool for tool in service_tools if isinstance(tool, PythonFunctionTool) and tool.takes_request}
            if request and service_tools else {}
        )

    @classmethod
    def for_request(
        cls, service_tools: Sequence[BaseTool[Any, Any]], client_tools: Sequence[ProxyTool], *, request: RequestContext | None = None
    ) -> "DuetWorkbench":
        """One request's workbench: the client's tools first, then the service's own; ``request`` is
        what its service tools are told about the request. Client tools as
        :func:`~duet.workbenches.proxy_tools_from_openai` gave them, and no service tool: the workbench
        is made from their index, made once per tool list, with no work per tool."""
        index = client_tools.shared_index if type(client_tools) is ClientTools else None
        if index is not None and not service_tools and index.tools == tuple(client_tools):  # still its tools (C compares)
            return cls._of_client_tools(index, request)
        return cls([*client_tools, *service_tools], request=request)

    @classmethod
    def _of_client_tools(cls, index: ClientToolIndex, request: RequestContext | None) -> "DuetWorkbench":
        """What ``cls(index.tools, request=request)`` makes, from the index. Mirrors StaticWorkbench.__init__
        of autogen-core 0.7.5 (pinned) for tools without overrides (its set of the tools' names only
        checks overrides); tests/unit/workbenches/test_workbench.py pins that the two agree."""
        workbench = cls.__new__(cls)
        workbench._tools = list(index.tools)
        workbench._tool_overrides = {}
        workbench._override_name_to_original = {}
        workbench._service_tools = []
        workbench._client_tools = index.by_name  # shared by the requests of this tool list: never changed
        workbench._schemas = index.schemas
        workbench._request = request
        workbench._takes_request = {}
        return workbench

    @property
    def request(self) -> RequestContext | None:
        """The request this workbench serves (``None`` outside a request)."""
        return self._request

    @property
    def tools(self) -> Sequence[BaseTool[Any, Any]]:
        return self._tools

    @property
    def service_tools(self) -> list[BaseTool[Any, Any]]:
        return list(self._service_tools)

    async def list_tools(self) -> list[ToolSchema]:
        # StaticWorkbench's, without its per-tool look for overrides (this workbench has none).
        if self._schemas is not None:
            return list(self._schemas)
        return [tool.schema for tool in self._tools]

    def client_tool(self, name: str) -> ProxyTool | None:
        """The client tool the model calls ``name`` (its alias or the client's own name), if it is one."""
        return self._client_tools.get(name)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> ToolResult:
        tool = self._takes_request.get(name)
        if tool is None:
            return await super().call_tool(name, arguments, cancellation_token, call_id)
        return await self._call_with_request(tool, arguments, cancellation_token, call_id)

    async def call_tool_stream(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> AsyncGenerator[Any | ToolResult, None]:
        tool = self._takes_request.get(name)
        if tool is None:
            async for item in super().call_tool_stream(name, arguments, cancellation_token, call_id):
                yield item
            return
        yield await self._call_with_request(tool, arguments, cancellation_token, call_id)

    async def _call_with_request(
        self,
        tool: PythonFunctionTool,
        arguments: Mapping[str, Any] | None,
        cancellation_token: CancellationToken | None,
        call_id: str | None,
    ) -> ToolResult:
        """Calls ``tool`` with this workbench's request, as ``StaticWorkbench.call_tool`` calls any
        tool: cancellable by the token, a raised error as an error result."""
        # A copy of autogen-core 0.7.5's StaticWorkbench.call_tool (and of the non-stream branch of
        # StaticStreamWorkbench.call_tool_stream), pinned in pyproject.toml: re-check it on upgrade.
        token = cancellation_token or CancellationToken()
        try:
            future = asyncio.ensure_future(tool.run_json(arguments or {}, token, call_id, request=self._request))
            token.link_future(future)
            text, is_error = tool.return_value_as_string(await future), False
        except Exception as exc:  # noqa: BLE001 - a failing tool is the model's error result, as in StaticStreamWorkbench
            text, is_error = self._format_errors(exc), True
        return ToolResult(name=tool.name, result=[TextResultContent(content=text)], is_error=is_error)

    def _to_config(self) -> DuetWorkbenchConfig:  # type: ignore[override]
        return DuetWorkbenchConfig(tools=[tool.dump_component() for tool in self._tools])

    @classmethod
    def _from_config(cls, config: DuetWorkbenchConfig) -> Self:  # type: ignore[override]
        return cls([BaseTool.load_component(tool) for tool in config.tools])


def _is_client_tool(tool: BaseTool[Any, Any]) -> bool:
    return tool.__class__ is ProxyTool or isinstance(tool, ProxyTool)  # the class first: see DuetWorkbench.__init__
