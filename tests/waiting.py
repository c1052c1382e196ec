"""Waiting on what makes a test's assertion true, never on the clock alone: every wait polls its
condition until a deadline, and a wait that times out says what it waited for."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Callable, TypeVar

from tests.conftest import DuetServer

T = TypeVar("T")
POLL = 0.02  # seconds between two looks: short next to any timeout used here


def wait_for(condition: Callable[[], object], timeout: float = 5.0) -> bool:
    """Polls ``condition`` until it is true or ``timeout`` seconds have passed; its last value as a bool."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(POLL)
    return bool(condition())


def eventually(condition: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    """The first true value of ``condition`` within ``timeout`` seconds; else fails saying ``what`` never happened."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(POLL)


async def until(condition: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    """:func:`eventually` for a coroutine: polls without blocking the event loop the test runs on."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(POLL)


def process_ended(pid: int) -> bool:
    """Whether process ``pid`` has ended: gone, or a zombie its parent has not reaped yet."""
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" in status.read_text().lower()
    except FileNotFoundError:
        return True


def refuses_connections(port: int) -> bool:
    """Whether nothing accepts connections on 127.0.0.1:``port`` any more."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def settle(duet: DuetServer, baseline_tasks: int) -> None:
    """No request in flight and no task left over (a little slack for the server's own housekeeping)."""
    assert wait_for(lambda: duet.health()["in_flight"] == 0), duet.health()
    assert wait_for(lambda: duet.health()["tasks"] <= baseline_tasks + 1), (duet.health(), baseline_tasks)
