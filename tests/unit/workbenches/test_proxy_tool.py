"""Proxy tools (``workbenches/_proxy_tool.py``): the model-safe alias of a client tool's name."""

from __future__ import annotations

from duet.workbenches import model_safe_name


def test_model_safe_names() -> None:
    assert model_safe_name("get_weather-2") == "get_weather-2"
    alias = model_safe_name("kb.search/v2")
    assert alias.startswith("kb_search_v2_") and alias == model_safe_name("kb.search/v2")
    assert model_safe_name("kb.search/v2") != model_safe_name("kb_search/v2")
    assert len(model_safe_name("x" * 200)) <= 64
