"""What a replayed model does in one answer, independent of how its server writes it on the wire.

A :class:`Scenario` is a :class:`Turn` (reasoning pieces, content pieces, tool calls) and perhaps a
:class:`Failure` (an HTTP error before the stream, or a failure after some events). Each dialect
turns the same scenario into its own server's bytes, so one scenario proves every dialect.

Without a script, :func:`default_scenario` reads the request as a model would: after a tool
result it answers; asked (by :data:`TOOL_MARK` or :data:`PARALLEL_MARK` in the last user message)
to call tools it calls them; otherwise it answers in text. A thinking model reasons first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

TOOL_MARK = "[call a tool]"
"""In the last user message: the replayed model calls the request's first tool once."""
PARALLEL_MARK = "[call tools]"
"""In the last user message: the replayed model makes two parallel calls of the first tool."""

REASONING = ("The user asks", " about the weather", " in Paris;", " I will answer", " now.")
ANSWER = ("Paris: ", "18 °C", " and sunny.")  # "°" is two bytes in UTF-8
ROUND_TRIP_ANSWER = ("The tool says ", "Paris is ", "18 °C.")

FailureKind = Literal["rate_limit", "bad_request", "model_not_found", "server_error", "mid_stream"]


@dataclass(frozen=True)
class Call:
    """One tool call; the server splits ``arguments`` into ``pieces`` fragments where it streams them."""

    name: str
    arguments: str
    pieces: int = 3

    def fragments(self) -> list[str]:
        """The arguments cut into ``pieces`` parts of even length: cuts fall inside keys and values."""
        size = max(1, -(-len(self.arguments) // max(1, self.pieces)))
        return [self.arguments[i : i + size] for i in range(0, len(self.arguments), size)] or [""]


@dataclass(frozen=True)
class Turn:
    reasoning: tuple[str, ...] = ()
    content: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()
    finish: str | None = None  # default: the dialect's word for "stopped" or "called tools"

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def content_text(self) -> str:
        return "".join(self.content)


@dataclass(frozen=True)
class Failure:
    """``mid_stream`` fails after ``after`` writes of the stream; every other kind fails before it."""

    kind: FailureKind
    after: int = 3


@dataclass(frozen=True)
class Scenario:
    turn: Turn = field(default_factory=Turn)
    failure: Failure | None = None

    # -- the scenarios every dialect can play -------------------------------------------------
    @classmethod
    def text(cls) -> "Scenario":
        return cls(Turn(content=ANSWER))

    @classmethod
    def reasoning_answer(cls) -> "Scenario":
        return cls(Turn(reasoning=REASONING, content=ANSWER))

    @classmethod
    def tool_call(cls, name: str = "get_weather", reasoning: bool = False) -> "Scenario":
        return cls(Turn(reasoning=REASONING if reasoning else (), calls=(weather_call(name, "Paris"),)))

    @classmethod
    def parallel_calls(cls, name: str = "get_weather", reasoning: bool = False) -> "Scenario":
        calls = (weather_call(name, "Paris"), weather_call(name, "Tokyo"))
        return cls(Turn(reasoning=REASONING if reasoning else (), calls=calls))

    @classmethod
    def round_trip_answer(cls, reasoning: bool = False) -> "Scenario":
        return cls(Turn(reasoning=REASONING if reasoning else (), content=ROUND_TRIP_ANSWER))

    @classmethod
    def error(cls, kind: FailureKind) -> "Scenario":
        return cls(Turn(content=ANSWER), Failure(kind))

    @classmethod
    def mid_stream(cls, after: int = 3, reasoning: bool = False) -> "Scenario":
        return cls(Turn(reasoning=REASONING if reasoning else (), content=ANSWER), Failure("mid_stream", after))


def weather_call(name: str, city: str) -> Call:
    return Call(name, json.dumps({"city": city, "unit": "celsius"}), pieces=3)


def default_scenario(body: dict[str, Any], thinking: bool) -> Scenario:
    """The answer a model gives to ``body`` when no scenario was scripted."""
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return Scenario.round_trip_answer(reasoning=thinking)
    tools = body.get("tools") or []
    text = _last_user_text(messages)
    if tools and (TOOL_MARK in text or PARALLEL_MARK in text):
        name = tools[0].get("function", {}).get("name", "get_weather")
        if PARALLEL_MARK in text:
            return Scenario.parallel_calls(name, reasoning=thinking)
        return Scenario.tool_call(name, reasoning=thinking)
    return Scenario.reasoning_answer() if thinking else Scenario.text()


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
            return content if isinstance(content, str) else ""
    return ""
