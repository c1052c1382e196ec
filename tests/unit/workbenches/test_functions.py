"""Python function tools (``workbenches/_functions.py``): arguments keep their types."""

from __future__ import annotations

import asyncio


def test_function_tool_arguments_keep_their_types() -> None:
    from duet.workbenches import PythonFunctionTool

    tool = PythonFunctionTool("tests.service_tools_fixtures:report")
    result = asyncio.run(tool.run_json({"window": {"days": 3}, "tags": ["a", "b"]}, cancellation_token=None))  # type: ignore[arg-type]
    assert result == "3:a,b"
