"""Client tools as AutoGen tools.

A client (Dify, an ``openai`` SDK script) sends OpenAI ``tools`` schemas; Duet does not run them.
Each becomes a :class:`ProxyTool` so it can sit in a workbench next to the tools Duet does run:
the reasoning agent reads its description, the answer model sees its schema, and when the model
calls it the answer agent hands the call back to the client instead of running it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Mapping, Optional, TypeVar

from autogen_core import CancellationToken, Component
from autogen_core.tools import BaseTool, ToolSchema
from pydantic import BaseModel, ConfigDict
from typing_extensions import Self

from duet._errors import DuetError

_T = TypeVar("_T")


class CachingToolSchema(dict):
    """A ``ToolSchema`` (a plain dict to every reader) that keeps what readers derive from it: the
    OpenAI ``tools`` entry a model client encodes, the line a reasoning prompt describes it with.
    A client tool's schema is sent with every request and read by every stage and round; derived
    once, each form is reused (see :func:`derived_from`). Changing the schema forgets them."""

    __slots__ = ("_derived",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._derived: dict[str, Any] = {}

    def _forget(self) -> None:
        self._derived = {}

    def __setitem__(self, key: Any, value: Any) -> None:
        self._forget()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._forget()
        super().__delitem__(key)

    def __ior__(self, other: Any) -> "CachingToolSchema":  # type: ignore[misc]  # mypy checks it against dict's overloaded __or__
        self._forget()
        super().__ior__(other)
        return self

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._forget()
        super().update(*args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._forget()
        return super().setdefault(key, default)

    def pop(self, *args: Any) -> Any:
        self._forget()
        return super().pop(*args)

    def popitem(self) -> Any:
        self._forget()
        return super().popitem()

    def clear(self) -> None:
        self._forget()
        super().clear()


def derived_from(schema: Mapping[str, Any], key: str, derive: Callable[[Mapping[str, Any]], _T]) -> _T:
    """``derive(schema)``, computed once per :class:`CachingToolSchema` and ``key`` (every time for
    any other schema). The schema's nested values (its ``parameters``) must not change after.

    >>> schema = CachingToolSchema(name="lookup")
    >>> derived_from(schema, "upper", lambda s: s["name"].upper()), derived_from(schema, "upper", lambda s: "again")
    ('LOOKUP', 'LOOKUP')
    """
    derived = getattr(schema, "_derived", None) if type(schema) is CachingToolSchema else None
    if derived is None:
        return derive(schema)
    try:
        return derived[key]
    except KeyError:
        value = derived[key] = derive(schema)
        return value


_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def model_safe_name(name: str) -> str:
    """The name a model may use for a tool: OpenAI accepts only ``^[a-zA-Z0-9_-]{1,64}$``.

    Valid names are returned unchanged. Others get a readable, deterministic alias (the same
    name always maps to the same alias, so history from earlier rounds stays consistent).

    >>> model_safe_name("get_weather"), model_safe_name("kb.search")
    ('get_weather', 'kb_search_e08cca43')
    """
    if _VALID_NAME.match(name):
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    readable = _INVALID_CHARS.sub("_", name)[:55].strip("_") or "tool"
    return f"{readable}_{digest}"


class ProxyToolArgs(BaseModel):
    """Accepts any JSON object: the client validates its own tool's arguments."""

    model_config = ConfigDict(extra="allow")


class ProxyToolConfig(BaseModel):
    """The client's schema, as received."""

    name: str
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None


class ClientSideToolError(DuetError, RuntimeError):
    """Raised when something tries to run a proxy tool in-process."""


class ProxyTool(BaseTool[ProxyToolArgs, str], Component[ProxyToolConfig]):  # type: ignore[type-var]  # its result is the client's text; BaseTool's bound asks for a model
    """A tool the client runs. ``name`` is what the model sees; ``client_name`` is the client's own.

    >>> tool = ProxyTool.from_openai({"type": "function", "function": {"name": "kb.search", "parameters": {"type": "object"}}})
    >>> tool.name, tool.client_name
    ('kb_search_e08cca43', 'kb.search')
    """

    component_type = "tool"
    component_config_schema = ProxyToolConfig
    component_provider_override = "duet.workbenches.ProxyTool"

    def __init__(
        self,
        name: str,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        strict: bool | None = None,
    ) -> None:
        self.client_name = name
        self._config = ProxyToolConfig(
            name=name, description=description, parameters=dict(parameters) if parameters is not None else None, strict=strict
        )
        super().__init__(ProxyToolArgs, str, model_safe_name(name), description or "", strict=bool(strict))
        # Built once: the schema the model sees is the client's, untouched (BaseTool.schema would
        # rebuild it from the args model, adding titles and ``additionalProperties: false``); what
        # the model client and the reasoning prompt derive from it is derived once, too.
        schema: dict[str, Any] = {"name": self.name}
        if description is not None:
            schema["description"] = description
        if parameters is not None:
            schema["parameters"] = parameters
        if strict is not None:
            schema["strict"] = strict
        self._schema: ToolSchema = CachingToolSchema(schema)  # type: ignore[assignment]

    @classmethod
    def from_openai(cls, tool: Mapping[str, Any]) -> "ProxyTool":
        """From one entry of an OpenAI ``tools`` list (``{"type": "function", "function": {...}}``)
        or a legacy ``functions`` entry (``{"name": ..., "parameters": ...}``)."""
        function = tool.get("function", tool)
        return cls(
            name=function["name"],
            description=function.get("description"),
            parameters=function.get("parameters"),
            strict=function.get("strict"),
        )

    @property
    def schema(self) -> ToolSchema:
        return self._schema

    async def run(self, args: ProxyToolArgs, cancellation_token: CancellationToken) -> str:
        raise ClientSideToolError(
            f"'{self.client_name}' is a client tool: Duet returns calls to it as tool_calls for the client to run."
        )

    def _to_config(self) -> ProxyToolConfig:
        return self._config.model_copy(deep=True)

    @classmethod
    def _from_config(cls, config: ProxyToolConfig) -> Self:
        return cls(name=config.name, description=config.description, parameters=config.parameters, strict=config.strict)
