"""Python functions as service tools (tools Duet runs itself, for every client).

Mark functions with :func:`service_tool` and name them by import path
(``package.module:function``, or ``package.module`` for every marked function in it)::

    from typing import Annotated
    from duet.workbenches import RequestContext, service_tool

    @service_tool(timeout=10)
    def lookup_customer(
        email: Annotated[str, "The customer's e-mail address"],
        _context: RequestContext,           # hidden from the model: who is asking
    ) -> str:
        \"\"\"Finds a customer record by e-mail.\"\"\"
        ...

The schema the model sees comes from the type hints, the ``Annotated`` descriptions and the
docstring. Parameters starting with ``_`` are hidden from the model; one named ``_context``
receives the :class:`RequestContext` (the request's workbench passes it with the call; called
outside a request, the tool gets an empty one). Sync functions run in a worker thread, so they never block
the event loop. A tool that raises, or runs past its timeout, returns an error the model reads;
the request goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import inspect
import json
import logging
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from autogen_core import EVENT_LOGGER_NAME, CancellationToken, Component, trace_tool_span
from autogen_core.logging import ToolCallEvent
from autogen_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, create_model
from typing_extensions import Self

from duet.workbenches._context import RequestContext

DEFAULT_TIMEOUT = 60.0

# Sync tools run here, not in the event loop's default executor: a tool that overruns its timeout
# keeps its thread until it returns (Python cannot stop a thread), and must not starve other work.
_TOOL_THREADS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="duet-tool")
_event_logger = logging.getLogger(EVENT_LOGGER_NAME)


@dataclass(frozen=True)
class _Marker:
    name: str | None
    description: str | None
    timeout: float | None


def service_tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> Any:
    """Marks a function as a service tool (usable bare, ``@service_tool``, or with options)."""

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        func.__duet_tool__ = _Marker(name, description, timeout)  # type: ignore[attr-defined]
        return func

    return mark(function) if function is not None else mark


def _import_path(function: Callable[..., Any]) -> str:
    return f"{function.__module__}:{function.__qualname__}"


def _resolve(path: str) -> Callable[..., Any]:
    module_name, _, attribute = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{path} is not callable")
    return target


def _description(function: Callable[..., Any]) -> str:
    doc = inspect.getdoc(function) or ""
    return doc.split("\n\n", 1)[0].strip()


def _args_model(function: Callable[..., Any], name: str) -> type[BaseModel]:
    """A pydantic model of the visible parameters: hints, defaults, ``Annotated`` descriptions."""
    hints = typing.get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name.startswith("_") or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(parameter.name, Any)
        description = None
        if typing.get_origin(annotation) is typing.Annotated:
            annotation, *metadata = typing.get_args(annotation)
            description = next((m for m in metadata if isinstance(m, str)), None)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, Field(default, description=description))
    model_name = "".join(part.capitalize() for part in name.split("_")) + "Args"
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)


class PythonFunctionToolConfig(BaseModel):
    function: str = Field(description="Import path, 'package.module:function'.")
    name: Optional[str] = None
    description: Optional[str] = None
    timeout: float = DEFAULT_TIMEOUT


class PythonFunctionTool(BaseTool[BaseModel, Any], Component[PythonFunctionToolConfig]):
    """A Python function as a tool, serialised by import path (never by source code)."""

    component_type = "tool"
    component_config_schema = PythonFunctionToolConfig
    component_provider_override = "duet.workbenches.PythonFunctionTool"

    def __init__(
        self,
        function: Callable[..., Any] | str,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        default_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._function = _resolve(function) if isinstance(function, str) else function
        marker: _Marker = getattr(self._function, "__duet_tool__", _Marker(None, None, None))
        tool_name = name or marker.name or self._function.__name__
        # An explicit timeout wins over the decorator's, which wins over the pipeline's default.
        self._timeout = timeout or marker.timeout or default_timeout
        self._explicit = (name, description, timeout)
        self._wants_context = "_context" in inspect.signature(self._function).parameters
        self._is_async = inspect.iscoroutinefunction(self._function)
        super().__init__(
            _args_model(self._function, tool_name),
            Any,
            tool_name,
            description or marker.description or _description(self._function) or tool_name,
        )

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def takes_request(self) -> bool:
        """The function has a ``_context`` parameter: a request's workbench passes the request to :meth:`run_json`."""
        return self._wants_context

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> Any:
        """Runs the function outside a request (``_context`` gets an empty :class:`RequestContext`)."""
        return await self._call(args, cancellation_token, None)

    async def run_json(
        self,
        args: Mapping[str, Any],
        cancellation_token: CancellationToken,
        call_id: str | None = None,
        *,
        request: RequestContext | None = None,
    ) -> Any:
        """As ``BaseTool.run_json`` (a traced span, the tool-call event logged); ``request`` is what
        the function's ``_context`` gets."""
        if request is None:
            return await super().run_json(args, cancellation_token, call_id)
        # A copy of autogen-core 0.7.5's BaseTool.run_json (pinned in pyproject.toml) with the
        # request passed on: re-check it on upgrade.
        with trace_tool_span(tool_name=self.name, tool_description=self.description, tool_call_id=call_id):
            value = await self._call(self.args_type().model_validate(args), cancellation_token, request)
        if _event_logger.isEnabledFor(logging.INFO):
            _event_logger.info(ToolCallEvent(tool_name=self.name, arguments=dict(args), result=self.return_value_as_string(value)))
        return value

    async def _call(self, args: BaseModel, cancellation_token: CancellationToken, request: RequestContext | None) -> Any:
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}  # nested models stay models
        if self._wants_context:
            kwargs["_context"] = request if request is not None else RequestContext()
        if self._is_async:
            call = self._function(**kwargs)
        else:  # sync code runs in a worker thread, never on the event loop (with the caller's context variables)
            loop = asyncio.get_running_loop()
            call = loop.run_in_executor(_TOOL_THREADS, contextvars.copy_context().run, functools.partial(self._function, **kwargs))
        try:
            return await asyncio.wait_for(call, self._timeout)
        except TimeoutError:
            raise TimeoutError(f"{self.name} did not finish within {self._timeout:g}s") from None

    def return_value_as_string(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except TypeError:
            return str(value)

    def _to_config(self) -> PythonFunctionToolConfig:
        name, description, timeout = self._explicit
        return PythonFunctionToolConfig(
            function=_import_path(self._function), name=name, description=description, timeout=timeout or self._timeout
        )

    @classmethod
    def _from_config(cls, config: PythonFunctionToolConfig) -> Self:
        return cls(config.function, name=config.name, description=config.description, timeout=config.timeout)


def function_tools(spec: str | Callable[..., Any], *, default_timeout: float = DEFAULT_TIMEOUT) -> list[PythonFunctionTool]:
    """Tools from an import path: ``module:function`` gives one; ``module`` gives every function
    in it marked with :func:`service_tool`. A callable gives its own tool."""
    if callable(spec) or ":" in spec:
        return [PythonFunctionTool(spec, default_timeout=default_timeout)]
    module = importlib.import_module(spec)
    marked = [value for value in vars(module).values() if callable(value) and hasattr(value, "__duet_tool__")]
    if not marked:
        raise ValueError(f"module {spec} has no function marked with @service_tool")
    return [PythonFunctionTool(function, default_timeout=default_timeout) for function in marked]
