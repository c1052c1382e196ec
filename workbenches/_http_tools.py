"""HTTP endpoints as service tools, through autogen-ext's ``HttpTool`` (their YAML settings:
:mod:`duet.workbenches._http_settings`)."""

from __future__ import annotations

from typing import Any, Optional

from autogen_ext.tools.http import HttpTool
from typing_extensions import Self

from duet.workbenches._http_settings import expand_env


class HttpServiceTool(HttpTool):
    """autogen-ext's ``HttpTool`` whose header values may name environment variables
    (``Authorization: "Bearer ${WEATHER_TOKEN}"``): expanded when the tool is built, kept as written
    when it is dumped, so an exported team carries the reference and never the secret."""

    component_provider_override = "duet.workbenches.HttpServiceTool"

    def __init__(self, *args: Any, headers: Optional[dict[str, Any]] = None, **kwargs: Any) -> None:
        self._header_templates = dict(headers or {})
        # An empty dict, not None: dump_component drops None values, and HttpToolConfig requires headers.
        super().__init__(*args, headers=expand_env(headers), **kwargs)  # type: ignore[misc]  # headers is only ever given by name

    def _to_config(self) -> Any:
        config = super()._to_config()
        config.headers = dict(self._header_templates)
        return config

    @classmethod
    def _from_config(cls, config: Any) -> Self:
        return cls(**config.model_dump())
