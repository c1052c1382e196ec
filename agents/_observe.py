"""What a run tells whoever watches it: each model call, each tool call, each continuation-store call.

The one hook protocol between the agents and monitoring. A request's :class:`RunObserver` is given to
:meth:`~duet.agents.Duet.start` and travels in the run binding (:attr:`DuetRun.observer`). The agents
report to it through the helpers below; with no observer (the default: scripts, AutoGen Studio) each
helper is one ``None`` check and returns what it was given, so nothing watching costs nothing. The
HTTP service's observer (metrics, spans, the request's log line) lives in ``duet.api.observability``;
the agents import nothing of it, nor any metrics or tracing library.

>>> stream = object()  # a model client's create_stream(...)
>>> observe_model_call(None, "answer", "qwen2.5", stream) is stream  # nothing watches: the stream itself
True
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, AsyncGenerator, Awaitable, Callable, Iterable, Literal, Mapping, Protocol, TypeVar

from autogen_core.models import CreateResult

if TYPE_CHECKING:
    from duet.agents._events import Usage
    from duet.agents._run import DuetRun

Stage = Literal["reasoner", "answer"]
"""The part of the duet a model call serves."""

StoreOutcome = Literal["ok", "miss", "unavailable", "cancelled"]
"""How a continuation-store call ended: done, nothing stored under the ids, failed or out (the round goes on without it), cancelled."""

_T = TypeVar("_T")


class ModelCallObserver(Protocol):
    """One model call being watched (what :meth:`RunObserver.model_call` returns)."""

    headers: Mapping[str, str] | None
    """Headers the upstream request carries for tracing (W3C ``traceparent``), or ``None``."""

    def first_piece(self) -> None:
        """The upstream's first piece arrived (reasoning, text, or the whole result)."""

    def ended(self, result: CreateResult | None, error: BaseException | None) -> None:
        """The call is over: ``result`` when the upstream finished; ``error`` when it failed or was
        cancelled (``GeneratorExit``: the agent stopped reading on purpose, a reasoning limit)."""


class ToolCallObserver(Protocol):
    """One service-tool call being watched."""

    def ended(self, is_error: bool, error: BaseException | None) -> None:
        """The tool returned (``is_error``: its result is an error), or the call raised ``error`` (cancelled)."""


class RunObserver(Protocol):
    """What a request's run reports. Called on the run's own tasks; each method returns at once."""

    def model_call(self, stage: Stage, model: str) -> ModelCallObserver | None:
        """A model call starts; ``None``: nothing more to report of it."""

    def tool_call(self, tool: str) -> ToolCallObserver | None:
        """A service-tool call starts (``tool``: its name as the model called it)."""

    def client_tool_calls(self, tools: Iterable[str]) -> None:
        """The answer model called these client tools (the client's names): handed to the client."""

    def store_call(self, operation: str, outcome: StoreOutcome, seconds: float) -> None:
        """A continuation-store call (``get``, ``put``) ended."""

    def usage(self, stage: Stage, usage: "Usage") -> None:
        """Tokens a model call's result did not report: Duet's estimate for a call it closed early, or
        none at all for a reasoning reused (``usage.origin``). Upstream counts come with :meth:`ModelCallObserver.ended`."""


def observer_of(run: "DuetRun | None") -> RunObserver | None:
    return run.observer if run is not None else None


_upstream_headers: ContextVar[Mapping[str, str] | None] = ContextVar("duet_upstream_headers", default=None)


def upstream_headers() -> Mapping[str, str] | None:
    """The tracing headers of the model call being sent, for a model client to add to its request."""
    return _upstream_headers.get()


request_sent_hook: ContextVar[Callable[[], None] | None] = ContextVar("duet_request_sent_hook", default=None)
"""What a model client calls once a request of the run it serves has been written to its
connection (set for a run's tasks by :meth:`~duet.agents.Duet.start`)."""


def observe_model_call(observer: RunObserver | None, stage: Stage, model: str, stream: Any) -> Any:
    """``stream`` (a model client's ``create_stream``) reported to ``observer``; itself without one."""
    if observer is None:
        return stream
    call = observer.model_call(stage, model)
    return stream if call is None else _observed_stream(call, stream)


async def _observed_stream(call: ModelCallObserver, stream: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    result: CreateResult | None = None
    error: BaseException | None = None
    try:
        # The request is sent (and retried) inside the first step: the headers are set for that step
        # alone, so they never outlive it in the agent's context.
        token = _upstream_headers.set(call.headers)
        try:
            piece = await stream.__anext__()
        finally:
            _upstream_headers.reset(token)
        call.first_piece()
        if isinstance(piece, CreateResult):
            result = piece
        yield piece
        async for piece in stream:
            if not isinstance(piece, str):  # the last piece (a CreateResult, or a client's subclass of it); text passes untouched
                result = piece
            yield piece
            piece = None  # handed on: not kept while the next one is awaited
    except StopAsyncIteration:  # a stream without a single piece
        pass
    except BaseException as exc:  # a failure, a cancellation, or the agent stopping early (GeneratorExit)
        error = exc
        raise
    finally:
        try:
            await stream.aclose()
        finally:
            call.ended(result, error)
            error = None  # no frame of the failure outlives the call


def observe_tool_call(observer: RunObserver | None, tool: str, call: Awaitable[_T]) -> Awaitable[_T]:
    """``call`` (a service tool's result, with ``is_error``) reported to ``observer``; itself without one."""
    watched = observer.tool_call(tool) if observer is not None else None
    return call if watched is None else _observed_tool_call(watched, call)


async def _observed_tool_call(watched: ToolCallObserver, call: Awaitable[_T]) -> _T:
    try:
        result = await call
    except BaseException as exc:
        watched.ended(True, exc)
        raise
    watched.ended(bool(getattr(result, "is_error", False)), None)
    return result


def observe_usage(run: "DuetRun | None", stage: Stage, usage: "Usage") -> None:
    """``usage`` (an estimate, or a reuse) told to ``run``'s observer, if it takes such reports."""
    observer = observer_of(run)
    report = getattr(observer, "usage", None)  # an observer written before this hook takes none
    if report is not None:
        report(stage, usage)


def observe_client_tool_calls(run: "DuetRun | None", tools: Iterable[str]) -> None:
    """``tools`` (read only when an observer watches) were handed to the client."""
    observer = observer_of(run)
    if observer is not None:
        observer.client_tool_calls(tools)
