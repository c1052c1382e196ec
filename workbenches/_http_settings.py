"""An HTTP tool as the YAML describes it; the tool itself (:mod:`duet.workbenches._http_tools`, which
needs ``httpx``) is imported only when a pipeline builds one."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, Optional
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from duet.workbenches._http_tools import HttpServiceTool


def expand_env(values: dict[str, Any] | None) -> dict[str, Any]:
    """``${NAME}`` in string values replaced by the environment variable (a secret stays out of files)."""
    return {key: os.path.expandvars(value) if isinstance(value, str) else value for key, value in (values or {}).items()}


class HttpToolSettings(BaseModel):
    """An HTTP tool in the YAML. The JSON Schema in ``parameters`` is what the model fills in;
    ``{name}`` placeholders in the URL path are filled from it, the rest goes in the query (GET,
    DELETE) or the JSON body. The response body reaches the model as it came (``HttpTool``'s
    ``json`` mode would hand it a Python repr of the parsed body)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    url: str
    method: Literal["GET", "POST", "PUT", "DELETE", "PATCH"] = "POST"
    headers: Optional[dict[str, Any]] = Field(None, description="Values may use ${ENV_VAR}.")
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    timeout: float = 30.0

    def build(self) -> HttpServiceTool:
        from duet.workbenches._http_tools import HttpServiceTool  # httpx and autogen-ext's HttpTool load only for a pipeline with HTTP tools

        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"HTTP tool {self.name!r}: {self.url!r} is not an http(s) URL")
        if parts.query or parts.fragment:
            raise ValueError(f"HTTP tool {self.name!r}: the URL cannot carry a query; declare its fields in 'parameters'")
        return HttpServiceTool(
            name=self.name,
            description=self.description or f"{self.method} {self.url}",
            scheme=parts.scheme,
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 80),
            path=parts.path or "/",
            method=self.method,
            headers=self.headers,
            json_schema=self.parameters,
            return_type="text",
            timeout=self.timeout,
        )
