"""Python functions the test servers load as service tools (``tests.service_tools_fixtures``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated

from pydantic import BaseModel

from duet.workbenches import RequestContext, service_tool


@service_tool
def lookup_customer(email: Annotated[str, "The customer's e-mail address"], _context: RequestContext, _secret: str = "hidden") -> dict:
    """Finds a customer by e-mail.

    The second paragraph of a docstring is not part of the description.
    """
    return {
        "email": email,
        "name": "Ada",
        "asked_by": _context.user,
        "pipeline": _context.pipeline,
        "request_id": _context.request_id,
        "thread": "worker" if threading.current_thread() is not threading.main_thread() else "main",
    }


@service_tool(timeout=0.5)
def slow_report(days: int = 7) -> str:
    """Builds a slow report."""
    time.sleep(3)
    return f"report for {days} days"


@service_tool(name="explode", description="Always fails.")
async def failing_tool(reason: str) -> str:
    await asyncio.sleep(0)
    raise ValueError(f"boom: {reason}")


def not_marked(x: int) -> int:
    """Not a tool: not marked, so ``tests.service_tools_fixtures`` does not include it."""
    return x


class Window(BaseModel):
    days: int


def report(window: Window, tags: list[str]) -> str:
    """Reports over a window (arguments keep their types: ``window`` arrives as a Window)."""
    return f"{window.days}:{','.join(tags)}"
