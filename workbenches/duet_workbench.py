"""The workbench a duet's two agents share."""

from __future__ import annotations

import logging
from typing import Any, Sequence

from autogen_core import Component, ComponentModel
from autogen_core.tools import BaseTool, StaticStreamWorkbench
from pydantic import BaseModel
from typing_extensions import Self

from .proxy_tool import ProxyTool

logger = logging.getLogger(__name__)


class DuetWorkbenchConfig(BaseModel):
    tools: list[ComponentModel] = []


class DuetWorkbench(StaticStreamWorkbench, Component[DuetWorkbenchConfig]):  # type: ignore[misc]
    """A ``StaticStreamWorkbench`` that also knows which of its tools belong to the client.

    Client tools (:class:`ProxyTool`) are listed to the model like any other tool; the answer
    agent asks :meth:`client_tool` to decide whether a call goes back to the client or runs here.
    A client tool shadows a service tool of the same name (the client asked for its own tool).

    >>> wb = DuetWorkbench([ProxyTool("lookup", parameters={"type": "object"})])
    >>> wb.client_tool("lookup").client_name
    'lookup'
    """

    component_provider_override = "duet.workbenches.DuetWorkbench"
    component_config_schema = DuetWorkbenchConfig  # type: ignore[assignment]

    def __init__(self, tools: Sequence[BaseTool[Any, Any]]) -> None:
        client_names = {tool.name for tool in tools if isinstance(tool, ProxyTool)}
        kept: list[BaseTool[Any, Any]] = []
        for tool in tools:
            if not isinstance(tool, ProxyTool) and tool.name in client_names:
                logger.warning("client tool '%s' shadows the service tool of the same name", tool.name)
                continue
            kept.append(tool)
        super().__init__(tools=kept)
        self._client_tools = {tool.name: tool for tool in kept if isinstance(tool, ProxyTool)}
        # Models sometimes call a tool by the client's original name instead of its alias.
        for tool in list(self._client_tools.values()):
            self._client_tools.setdefault(tool.client_name, tool)

    @classmethod
    def for_request(cls, service_tools: Sequence[BaseTool[Any, Any]], client_tools: Sequence[ProxyTool]) -> "DuetWorkbench":
        """One request's workbench: the client's tools first, then the service's own."""
        return cls([*client_tools, *service_tools])

    @property
    def tools(self) -> Sequence[BaseTool[Any, Any]]:
        return self._tools

    @property
    def service_tools(self) -> list[BaseTool[Any, Any]]:
        return [tool for tool in self._tools if not isinstance(tool, ProxyTool)]

    def client_tool(self, name: str) -> ProxyTool | None:
        """The client tool the model calls ``name`` (its alias or the client's own name), if it is one."""
        return self._client_tools.get(name)

    def _to_config(self) -> DuetWorkbenchConfig:  # type: ignore[override]
        return DuetWorkbenchConfig(tools=[tool.dump_component() for tool in self._tools])

    @classmethod
    def _from_config(cls, config: DuetWorkbenchConfig) -> Self:  # type: ignore[override]
        return cls([BaseTool.load_component(tool) for tool in config.tools])
