"""Every line logged while a request is served names its request and, when it is part of one, its trace."""

from __future__ import annotations

import json
import logging

from duet.api.observability._logs import JsonFormatter, TextFormatter, _install_record_context, reset_request_id, set_request_id

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def record() -> logging.LogRecord:
    _install_record_context()
    return logging.getLogger("duet.test").makeRecord("duet.test", logging.INFO, __file__, 1, "model call failed", (), None)


def test_text_and_json_lines_carry_the_request_and_its_trace() -> None:
    token = set_request_id("req-1", TRACE)
    try:
        inside = record()
    finally:
        reset_request_id(token)
    assert TextFormatter().format(inside).endswith(f"INFO duet.test [request req-1] [trace {TRACE}]: model call failed")
    entry = json.loads(JsonFormatter().format(inside))
    assert (entry["request_id"], entry["trace_id"]) == ("req-1", TRACE)


def test_a_request_in_no_trace_and_a_line_outside_any_request() -> None:
    token = set_request_id("req-2")
    try:
        untraced = record()
    finally:
        reset_request_id(token)
    assert TextFormatter().format(untraced).endswith("INFO duet.test [request req-2]: model call failed")
    outside = record()
    assert "trace_id" not in json.loads(JsonFormatter().format(outside)) and "request_id" not in json.loads(JsonFormatter().format(outside))
