"""The request a service tool is running for."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict


class RequestContext(BaseModel):
    """What a service tool may know about the request that called it (its ``_context`` parameter).

    The request's :class:`~duet.workbenches.DuetWorkbench` hands it to the tool with each call; a
    tool called outside a request (from a script, or a team run in AutoGen Studio) gets an empty one.
    Frozen: the same object goes to every tool of the request, sync ones in worker threads at once.
    """

    model_config = ConfigDict(frozen=True)

    request_id: str = ""
    user: Optional[str] = None
    pipeline: str = ""
    owner: str = ""
    """Whose stored state the request reads and writes: a stable, non-reversible id of its API key
    (empty for an open endpoint, keys that share state, or a run started from Python)."""
