"""The request a service tool is running for."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Optional

from pydantic import BaseModel


class RequestContext(BaseModel):
    """What a service tool may know about the request that called it (its ``_context`` parameter)."""

    request_id: str = ""
    user: Optional[str] = None
    pipeline: str = ""


_current_request: ContextVar[RequestContext | None] = ContextVar("duet_request", default=None)


def current_request() -> RequestContext:
    """The calling request, or an empty context outside one (a tool run from a script)."""
    return _current_request.get() or RequestContext()


def bind_request(context: RequestContext) -> None:
    """Binds ``context`` to the calling task (and the tasks it creates from now on)."""
    _current_request.set(context)
