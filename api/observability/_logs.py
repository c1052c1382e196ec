"""Log lines: text or JSON (``DUET_LOG_FORMAT``), each naming the request it was written for.

The request id (the client's ``X-Request-ID`` when it is usable, else a new one) and its trace id (its
span's, or the client's ``traceparent``'s) are held in context variables for the request's whole
handling, which the tasks of its run inherit: every line logged while serving it carries them,
whichever logger wrote it. With several workers every line also names its
worker (``worker`` = its pid). Secrets are masked in each record before any formatter sees it
(:func:`duet.api._errors.install_secret_masking`, installed by every app).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import warnings
from contextvars import ContextVar
from typing import Any, Literal

from duet.agents import mask_secrets, random_id

LogFormat = Literal["text", "json"]

MAX_REQUEST_ID = 128
_USABLE_ID = re.compile(rb"[A-Za-z0-9._:/=+-]{1,%d}" % MAX_REQUEST_ID)

_request_id: ContextVar[str | None] = ContextVar("duet_request_id", default=None)
_trace_id: ContextVar[str | None] = ContextVar("duet_trace_id", default=None)


def request_id_from(header: bytes | None) -> str:
    """The client's ``X-Request-ID`` if it is a plain token of at most :data:`MAX_REQUEST_ID`
    characters (letters, digits, ``._:/=+-``), else a new one: nothing else reaches a log line or
    a response header."""
    if header is not None and _USABLE_ID.fullmatch(header):
        return header.decode("ascii")
    return random_id()


def current_request_id() -> str | None:
    return _request_id.get()


def set_request_id(request_id: str | None, trace_id: str | None = None) -> Any:
    """Binds ``request_id`` and the request's ``trace_id`` to the calling task (and the tasks it
    starts); returns the token to reset."""
    return _request_id.set(request_id), _trace_id.set(trace_id)


def reset_request_id(token: Any) -> None:
    request_token, trace_token = token
    _trace_id.reset(trace_token)
    _request_id.reset(request_token)


_context_installed = False
_worker: int | None = None
_json_lines = False


def json_lines() -> bool:
    """Whether the process logs JSON lines (:func:`configure_logging`)."""
    return _json_lines


def _install_record_context() -> None:
    """Every log record gets ``request_id`` and ``trace_id`` (``None`` outside a request, or a request
    in no trace) and ``worker`` (``None`` in a single process)."""
    global _context_installed
    if _context_installed:
        return
    _context_installed = True
    make_record = logging.getLogRecordFactory()

    def record_with_context(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        record.request_id = _request_id.get()
        record.trace_id = _trace_id.get()
        record.worker = _worker
        return record

    logging.setLogRecordFactory(record_with_context)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger [worker 12] [request abc] [trace 4bf9…]: message``; a request's line holds
    its fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        context = ""
        worker = getattr(record, "worker", None)
        if worker is not None:
            context += f" [worker {worker}]"
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            context += f" [request {request_id}]"
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            context += f" [trace {trace_id}]"
        record.context = context
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, ``request_id``,
    ``trace_id``, ``worker``, the fields of a request's line, and ``exception`` (masked) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            entry["request_id"] = request_id
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            entry["trace_id"] = trace_id
        worker = getattr(record, "worker", None)
        if worker is not None:
            entry["worker"] = worker
        fields = getattr(record, "request_fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        # A request's fields are not in the message the record factory masked: the whole line is masked here.
        return mask_secrets(json.dumps(entry, ensure_ascii=False, default=str))


def formatter_for(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure_logging(log_level: str, log_format: LogFormat = "text", worker: bool = False) -> None:
    """The process's logging: one handler on stderr in ``log_format``; Duet's loggers at
    ``log_level`` (AutoGen's stay at WARNING: its INFO lines describe every runtime message);
    ``worker``: every line names this process (one of several workers)."""
    global _worker, _json_lines
    _worker = os.getpid() if worker else None
    _json_lines = log_format == "json"
    _install_record_context()
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    root.setLevel(logging.WARNING)
    for handler in root.handlers:
        handler.setFormatter(formatter_for(log_format))
    logging.getLogger("duet").setLevel(log_level.upper())
    # uvicorn's own lines (started, shutting down) in the same format: through the root handler.
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).setLevel(log_level.upper())
    warnings.showwarning = log_warning


def log_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                line: str | None = None) -> None:
    """A Python warning (an old team file's) as one log line in the log's format, named by its kind
    as Python names it (``FutureWarning: …``): not two raw lines on stderr, which a JSON log would not parse."""
    kind = next(base for base in category.__mro__ if base.__module__ == "builtins").__name__
    logging.getLogger("py.warnings").warning("%s: %s", kind, message)


def logfmt(fields: dict[str, Any]) -> str:
    """``key=value`` pairs; values with spaces or quotes JSON-quoted.

    >>> logfmt({"status": 200, "path": "/v1 x", "stream": True, "gone": None, "reasoner": {"calls": 1}})
    'status=200 path="/v1 x" stream=true reasoner={"calls":1}'
    """
    parts = []
    for key, value in fields.items():
        kind = value.__class__  # the fields are built by Duet: plain types (no isinstance call per field)
        if value is None:
            continue
        if kind is str:
            text = json.dumps(value, ensure_ascii=False) if not value or _NEEDS_QUOTES.search(value) else value
        elif kind is dict or kind is list:
            text = _compact(value)
        elif kind is bool:
            text = "true" if value else "false"
        elif kind is int or kind is float:
            text = f"{value}"
        elif isinstance(value, str):
            text = json.dumps(value, ensure_ascii=False) if not value or _NEEDS_QUOTES.search(value) else value
        else:
            text = _compact(value) if isinstance(value, (dict, list)) else str(value)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def write_line(log: logging.Logger, message: str, *args: object, extra: dict[str, Any] | None = None) -> None:
    """``log.info(message, *args, extra=extra)`` for a line written once per request: the same record,
    handled the same way, without logging's walk up the stack for the caller's file and line (a dozen
    calls per line, which no formatter of Duet shows): the record names this function."""
    # Mirrors Logger._log of Python 3.11 (no exc_info, no stack_info), findCaller's answer given.
    log.handle(log.makeRecord(log.name, logging.INFO, __file__, _WRITE_LINE, message, args, None, "write_line", extra))


_WRITE_LINE = write_line.__code__.co_firstlineno


_NEEDS_QUOTES = re.compile(r'[\s"=]|[^ -~]')  # blanks, quotes, '=', anything not printable ASCII
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
