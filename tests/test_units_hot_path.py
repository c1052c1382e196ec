"""The hot path's shortcuts, tested directly (no HTTP): each does less work than the stock code it
replaces and gives the same result. Real objects throughout (AutoGen's runtime and agents, Duet's
tools and model client)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from autogen_core import AgentId, ClosureAgent, ClosureContext, DefaultTopicId, MessageContext
from autogen_core import TypeSubscription

from duet.agents.runtime import LeanAgentRuntime


class Counted:
    """A message whose ``repr`` is counted: the stock runtime formats it for its INFO line."""

    reprs = 0

    def __init__(self, text: str) -> None:
        self.text = text
        self.part = _CountedPart()


class _CountedPart:
    def __repr__(self) -> str:
        Counted.reprs += 1
        return "part"


async def _deliver_one_of_each() -> list[str]:
    """Publishes one message and sends one to a closure agent on a lean runtime; what it received."""
    received: list[str] = []

    async def collect(_: ClosureContext, message: Counted, ctx: MessageContext) -> str:
        received.append(f"{'rpc' if ctx.is_rpc else 'published'} {message.text}")
        return "ok"

    runtime = LeanAgentRuntime()
    await ClosureAgent.register_closure(runtime, "collector", collect, subscriptions=lambda: [TypeSubscription("default", "collector")])
    runtime.start()
    await runtime.publish_message(Counted("one"), DefaultTopicId())
    reply = await asyncio.wait_for(runtime.send_message(Counted("two"), AgentId("collector", "default")), 5)
    await runtime.stop_when_idle()
    assert reply == "ok"
    return sorted(received)


@pytest.mark.parametrize("level", [logging.WARNING, logging.INFO])
def test_lean_runtime_formats_its_info_lines_only_when_info_is_enabled(level: int, caplog: pytest.LogCaptureFixture) -> None:
    Counted.reprs = 0
    with caplog.at_level(level, logger="autogen_core"):
        received = asyncio.run(_deliver_one_of_each())
    assert received == ["published one", "rpc two"]  # delivered either way
    lines = [r.getMessage() for r in caplog.records if r.name == "autogen_core"]
    if level == logging.INFO:  # the stock lines, formatted as AutoGen formats them
        assert any(line.startswith("Publishing message of type Counted") and "part" in line for line in lines)
        assert any(line.startswith("Sending message of type Counted to collector") and "part" in line for line in lines)
        assert Counted.reprs >= 2
    else:
        assert Counted.reprs == 0
        assert not any("message of type Counted" in line for line in lines)
