"""The request a service tool is running for."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel


class RequestContext(BaseModel):
    """What a service tool may know about the request that called it (its ``_context`` parameter).

    The request's :class:`~duet.workbenches.DuetWorkbench` hands it to the tool with each call; a
    tool called outside a request (from a script, or a team run in AutoGen Studio) gets an empty one.
    """

    request_id: str = ""
    user: Optional[str] = None
    pipeline: str = ""
