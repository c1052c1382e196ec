"""What one request hands the agents besides the conversation: the run binding.

The conversation travels inside the team's messages (:mod:`duet.agents._messages`). Three things
cannot travel that way and are bound to the request instead, in one context variable set for the
duration of a run by :func:`bind_run`: where the agents put their events, the request's workbench
(client tools beside service tools, and the request service tools are told about), and the answer
model's options. The team's runtime is started inside the binding, so its tasks inherit it.

Outside a request (AutoGen Studio, a plain ``team.run(task="...")``) nothing is bound and the
agents behave like any AgentChat agent: they yield their events and use their own workbench. An
agent handed a Duet task with nothing bound raises :class:`RunNotBoundError`: its events would go
nowhere.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Sequence

from duet.workbenches import DuetWorkbench, RequestContext

from duet.agents._errors import DuetError
from duet.agents._events import DuetEvent
from duet.agents._options import AnswerOptions

if TYPE_CHECKING:
    from duet.agents._observe import RunObserver
    from duet.agents.continuations import ReasoningLedger


async def _never_full() -> None:
    return None


class EarlyTurn(Protocol):
    """An agent's turn started before the team handed it its messages (:meth:`DuetRun.head_start`)."""

    async def under_way(self) -> None:
        """Returns once the turn has handed on its first event, or has ended."""

    async def close(self) -> None:
        """Stops the turn; no team took it."""


@dataclass(slots=True, eq=False)
class _HeadStart:
    agent: str
    messages: Sequence[Any]
    turn: EarlyTurn


@dataclass(slots=True, eq=False)
class DuetRun:
    """One request's binding.

    ``emit`` never blocks (it is called for every delta): it hands the event on and returns False
    once the reader has fallen a bounded number of events behind. An agent that gets False awaits
    ``room()`` before it reads on from its model, so a client that stops reading stops the model
    calls' reads too (backpressure), and the events waiting for a reader stay bounded.
    ``request`` is the request the workbench hands its service tools (the same object).
    ``observer`` watches the run's model, tool and store calls (:mod:`duet.agents._observe`).
    ``ledger`` keeps the reasoning of the pipeline's requests for their retries.

    A run may hold one turn started ahead of the team (:meth:`head_start`): the agent that speaks
    first starts its turn before the team routes the task to it (:meth:`head_start_under_way`).
    """

    emit: Callable[[DuetEvent], bool]
    workbench: DuetWorkbench
    room: Callable[[], Awaitable[None]] = _never_full
    options: AnswerOptions = field(default_factory=AnswerOptions)
    request: RequestContext = field(default_factory=RequestContext)
    observer: "RunObserver | None" = None
    ledger: "ReasoningLedger | None" = None
    """The pipeline's reasoning already paid for (a retry of the same request reuses it)."""
    notes: dict[int, tuple[str, str]] = field(default_factory=dict)
    """The reasoning (and retrieved context) earlier user turns were answered with, by the index of the
    user message in the conversation: put back where they were in the answer model's prompt. Fetched
    while the reasoner thinks: complete once :meth:`notes_recalled` returns."""
    note_digest: str | None = None
    """The digest of the conversation, when it ends with the user turn the reasoner thinks about: the
    key its reasoning is kept under as that turn's note."""
    recalling: "Awaitable[None] | None" = None
    _head_start: _HeadStart | None = None

    @property
    def request_id(self) -> str:
        return self.request.request_id

    async def notes_recalled(self) -> dict[int, tuple[str, str]]:
        """:attr:`notes`, once the store has answered (or failed: then the notes it could not give are missing)."""
        recalling, self.recalling = self.recalling, None
        if recalling is not None:
            await recalling
        return self.notes

    def head_start(self, agent: str, messages: Sequence[Any], turn: EarlyTurn) -> None:
        """Keeps ``turn``, which ``agent`` started on ``messages`` before the team handed them over."""
        self._head_start = _HeadStart(agent, messages, turn)

    def take_head_start(self, agent: str, messages: Sequence[Any]) -> Any:
        """The turn ``agent`` started ahead on exactly these ``messages`` (the same objects the team
        now hands it), or ``None``. Taken once: from here on the agent owns it."""
        early = self._head_start
        if early is None or early.agent != agent or len(early.messages) != len(messages) \
                or any(a is not b for a, b in zip(early.messages, messages, strict=True)):
            return None
        self._head_start = None
        return early.turn

    async def head_start_under_way(self) -> None:
        """Returns once the turn started ahead (if any) has handed on its first event, or has ended."""
        if self._head_start is not None:
            await self._head_start.turn.under_way()

    async def drop_head_start(self) -> None:
        """Stops a turn started ahead that the team never took (the run ended before it)."""
        early, self._head_start = self._head_start, None
        if early is not None:
            await early.turn.close()


class RunNotBoundError(DuetError):
    """An agent was handed a Duet task (the conversation in a handoff from the client) while no
    run is bound: its events and the client's tools would have nowhere to go."""


_current_run: ContextVar[DuetRun | None] = ContextVar("duet_run", default=None)


def current_run() -> DuetRun | None:
    """The request the calling agent works for, or ``None`` outside a Duet request."""
    return _current_run.get()


class bind_run:  # used as a function: ``with bind_run(run):``
    """Binds ``run`` for the ``with`` block: to the calling task, and to every task created inside
    the block (start the team's runtime inside it). Unbound when the block ends, however it ends.
    (A class, not a generator: it lasts as long as the run, and a generator's frame costs more.)

    >>> from duet.workbenches import DuetWorkbench
    >>> with bind_run(DuetRun(emit=lambda event: True, workbench=DuetWorkbench([]))) as run:
    ...     current_run() is run
    True
    >>> current_run() is None
    True
    """

    __slots__ = ("_run", "_token")

    def __init__(self, run: DuetRun) -> None:
        self._run = run
        self._token: Token[DuetRun | None] | None = None

    def __enter__(self) -> DuetRun:
        self._token = _current_run.set(self._run)
        return self._run

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _current_run.reset(self._token)
        self._token = None
