"""Replays of the wire dialects of real model servers, on 127.0.0.1 (see README.md here)."""

from .dialect import Dialect, HttpError, IssuedCall, Ledger
from .dialects import DIALECTS
from .scenario import ANSWER, PARALLEL_MARK, REASONING, ROUND_TRIP_ANSWER, TOOL_MARK, Call, Failure, Scenario, Turn
from .server import RecordedRequest, ReplayUpstream

__all__ = [
    "ANSWER", "DIALECTS", "PARALLEL_MARK", "REASONING", "ROUND_TRIP_ANSWER", "TOOL_MARK",
    "Call", "Dialect", "Failure", "HttpError", "IssuedCall", "Ledger", "RecordedRequest", "ReplayUpstream", "Scenario", "Turn",
]
