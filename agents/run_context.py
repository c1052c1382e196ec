"""What one request hands the agents besides the conversation.

The conversation travels inside the team's messages (a ``HandoffMessage`` from the client whose
``context`` is the conversation). Three things cannot travel that way and are bound to the
request instead, through a context variable that the team's runtime inherits: where the agents
put their events, the request's workbench (client tools beside service tools), and the answer
model's options. Outside a request (AutoGen Studio, a plain ``team.run()``) nothing is bound and
the agents behave like any AgentChat agent: they yield their events and use their own workbench.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal

from pydantic import BaseModel, Field

from duet.workbenches import DuetWorkbench

from .events import DuetEvent


class AnswerOptions(BaseModel):
    """Per-request options for the answer model, from the client's request."""

    tool_choice: Literal["auto", "none", "required"] | str = Field(
        "auto", description="'auto', 'none', 'required', or the (model-facing) name of the tool to call."
    )
    create_args: dict[str, Any] = Field(
        default_factory=dict,
        description="OpenAI request fields passed to the answer model: temperature, top_p, max_tokens, stop, seed, ...",
    )
    single_tool_call: bool = Field(False, description="Return at most one tool call (legacy 'functions' clients).")


async def _never_full() -> None:
    return None


@dataclass(slots=True, eq=False)
class DuetRun:
    """One request's binding.

    ``emit`` never blocks (it is called for every delta): it hands the event on and returns False
    once the reader has fallen a bounded number of events behind. An agent that gets False awaits
    ``room()`` before it reads on from its model, so a client that stops reading stops the model
    calls' reads too (backpressure), and the events waiting for a reader stay bounded.
    """

    emit: Callable[[DuetEvent], bool]
    workbench: DuetWorkbench
    room: Callable[[], Awaitable[None]] = _never_full
    options: AnswerOptions = field(default_factory=AnswerOptions)
    request_id: str = ""
    user: str | None = None
    pipeline: str = ""


_current_run: ContextVar[DuetRun | None] = ContextVar("duet_run", default=None)


def current_run() -> DuetRun | None:
    """The request the calling agent works for, or ``None`` outside a Duet request."""
    return _current_run.get()


def bind_run(run: DuetRun) -> None:
    """Binds ``run`` to the calling task's context (and the tasks it creates from now on)."""
    _current_run.set(run)
