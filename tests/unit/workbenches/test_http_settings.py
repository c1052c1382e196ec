"""HTTP tool settings (``workbenches/_http_settings.py``): secrets from the environment, kept out of
exports."""

from __future__ import annotations

import pytest


def test_http_tool_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from duet.workbenches import HttpToolSettings

    monkeypatch.setenv("WEATHER_TOKEN", "s3cret")
    tool = HttpToolSettings(name="w", url="https://api.example.com/w/{city}", headers={"Authorization": "Bearer ${WEATHER_TOKEN}"}).build()
    assert tool.server_params.headers == {"Authorization": "Bearer s3cret"}
    dumped = tool.dump_component().model_dump_json()
    assert "s3cret" not in dumped and "${WEATHER_TOKEN}" in dumped  # exports keep the reference
    from autogen_core.tools import BaseTool

    assert BaseTool.load_component(tool.dump_component()).server_params.headers == {"Authorization": "Bearer s3cret"}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="cannot carry a query"):
        HttpToolSettings(name="w", url="https://api.example.com/w?key=abc").build()
