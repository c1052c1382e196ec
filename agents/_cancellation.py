"""The cancellation token of one run, which forgets what it no longer needs to cancel."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from autogen_core import CancellationToken


def unlink(token: CancellationToken, callback: Callable[[], Any]) -> None:
    """Removes ``callback`` (the same object, or one equal to it) from what cancelling ``token``
    calls; nothing happens if it is not there. Relies on autogen-core 0.7.5's ``CancellationToken``
    (pinned): a list of callbacks under a lock."""
    with token._lock:
        try:
            token._callbacks.remove(callback)
        except ValueError:
            pass


def child_token(parent: CancellationToken) -> "RunToken":
    """A token cancelled when ``parent`` is (or on its own: a call's time limit), and asking what
    ``parent`` asks (:meth:`RunToken.caller_gone`). Pass it to :func:`unlink_child` when the call
    ends: ``parent`` would otherwise keep it, and all it linked (the call's upstream response), for as
    long as ``parent`` lives."""
    child = RunToken(caller_gone=parent.caller_gone if isinstance(parent, RunToken) else None)
    parent.add_callback(child.cancel)
    return child


def still_wanted(token: CancellationToken | None) -> bool:
    """False when ``token`` is cancelled, or when the caller of its run is found gone now (a
    :class:`RunToken`'s ``caller_gone``: then the token is cancelled here). Ask it just before
    something that costs (a model request going out), not in every loop."""
    if token is None:
        return True
    if isinstance(token, RunToken):
        return not token.caller_gone()
    return not token.is_cancelled()


def unlink_child(parent: CancellationToken, child: CancellationToken) -> None:
    """``parent`` no longer cancels ``child`` (made by :func:`child_token`)."""
    unlink(parent, child.cancel)


class RunToken(CancellationToken):
    """A ``CancellationToken`` that drops its link to a future once the future is done.

    The stock token keeps every future linked to it (and whatever the future's result holds) until
    the token dies: for a run, every message the team's runtime and group chat waited for, every
    upstream request (its response), every tool call, until the run ends. A done future has nothing
    left to cancel. Cancelling works as for the stock token.

    ``caller_gone``, when given, tells whether whoever waits for the run has gone without having
    cancelled it yet (the HTTP edge asks the kernel whether the client closed its connection, which
    a busy event loop reads only later): :meth:`caller_gone` asks it, and cancels the token if so.

    >>> async def main():
    ...     token = RunToken()
    ...     future = token.link_future(asyncio.get_running_loop().create_future())
    ...     future.set_result("done")
    ...     await asyncio.sleep(0)
    ...     return len(token._callbacks)
    >>> asyncio.run(main())
    0
    """

    def __init__(self, caller_gone: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self._caller_gone = caller_gone

    def caller_gone(self) -> bool:
        """Whether the run is cancelled, or its caller has gone (then it is cancelled now)."""
        if self._cancelled:
            return True
        if self._caller_gone is not None and self._caller_gone():
            self.cancel()
            return True
        return False

    def link_future(self, future: asyncio.Future[Any]) -> asyncio.Future[Any]:
        with self._lock:
            if self._cancelled:
                future.cancel()
                return future
            self._callbacks.append(future.cancel)  # type: ignore[arg-type]  # as the stock link_future: its bool is not read
        future.add_done_callback(self._unlink_done)
        return future

    def _unlink_done(self, future: asyncio.Future[Any]) -> None:
        unlink(self, future.cancel)
