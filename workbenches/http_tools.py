"""HTTP endpoints as service tools, through autogen-ext's ``HttpTool``."""

from __future__ import annotations

from typing import Any, Literal, Optional
from urllib.parse import urlsplit

from autogen_ext.tools.http import HttpTool
from pydantic import BaseModel, ConfigDict, Field


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
    headers: Optional[dict[str, Any]] = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    timeout: float = 30.0

    def build(self) -> HttpTool:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"HTTP tool {self.name!r}: {self.url!r} is not an http(s) URL")
        return HttpTool(
            name=self.name,
            description=self.description or f"{self.method} {self.url}",
            scheme=parts.scheme,  # type: ignore[arg-type]
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 80),
            path=parts.path or "/",
            method=self.method,
            headers=self.headers or {},  # None would not survive dump_component (it drops None values)
            json_schema=self.parameters,
            return_type="text",
            timeout=self.timeout,
        )
