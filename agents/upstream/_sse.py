"""Reading server-sent events: an upstream's streamed body as the ``data`` of its events, read by read."""

from __future__ import annotations

from typing import AsyncGenerator, Protocol

import aiohttp

from duet._errors import DuetError

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Largest single server-sent event (a stream without event separators is not buffered forever)."""
SINGLE_CHUNK_READS = 8
"""Reads of one HTTP chunk each, at most, at the start of a stream (see :func:`sse_data`)."""


class EventTooLarge(DuetError):
    """More than :data:`MAX_EVENT_BYTES` arrived without an event separator."""


class FirstTokenAwaited(Protocol):
    """What :func:`sse_data` asks of its reader (the stream's accumulator): whether the model's first
    token is still to come. An attribute of an object the stream has anyway, not a closure more (a
    function and a cell, ~150 bytes, for as long as the stream lasts)."""

    @property
    def awaiting_first_token(self) -> bool: ...


async def sse_data(response: aiohttp.ClientResponse, reader: FirstTokenAwaited) -> AsyncGenerator[list[bytes], None]:
    """The ``data`` of the server-sent events, a list for each read: the complete events that
    arrived together (several often do; a line-by-line reader would await each line).

    While ``reader.awaiting_first_token`` is true, a read takes one HTTP chunk (at most
    :data:`SINGLE_CHUNK_READS` such reads). A model's first tokens come in a burst, and aiohttp
    hands over a buffered burst chunk by chunk at some cost each: the first token goes on before the
    rest of the burst is read. A connection that breaks does not lose what had arrived before it
    broke: those events come first, then the error."""
    content = response.content
    buffer = b""
    single_reads = SINGLE_CHUNK_READS
    broken: aiohttp.ClientError | None = None
    while broken is None:
        try:
            if single_reads and reader.awaiting_first_token:
                single_reads -= 1
                received, end_of_chunk = await content.readchunk()
                if not received and end_of_chunk:  # an empty read at a chunk's end: not the end of the body
                    continue
            else:
                single_reads = 0  # the first token has gone: not asked again
                received = await content.readany()
        except aiohttp.ClientError as exc:
            received = received_before_failure(content)
            if not received:
                raise
            broken = exc
        if not received:
            break
        buffer = buffer + received if buffer else received
        held = b""
        if b"\r" in buffer:  # CRLF or CR line ends; a CR at the very end may still pair with an LF
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        events: list[bytes] = []
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            event = buffer[start:end]
            start = end + 2
            if event.startswith(b"data:") and b"\n" not in event:
                events.append(event[5:].lstrip())
            else:  # comments, ``event:``/``id:`` lines, multi-line data
                _add_event_data(events, event)
        buffer = buffer[start:] + held
        received = event = None  # type: ignore[assignment]  # the read is parsed: not kept while the next one is awaited
        if events:
            yield events
        events = None  # type: ignore[assignment]
        if len(buffer) > MAX_EVENT_BYTES:
            raise EventTooLarge()
    if broken is not None:
        raise broken


def _add_event_data(events: list[bytes], event: bytes) -> None:
    """The ``data`` of an event of several lines (its ``data:`` lines joined; comments, ``event:`` and
    ``id:`` lines left out), if it has any.

    >>> events = []
    >>> for event in (b": keep-alive", b"event: delta\\ndata: two\\ndata: 2"):
    ...     _add_event_data(events, event)
    >>> events
    [b'two\\n2']
    """
    lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
    if lines:
        events.append(b"\n".join(lines))


def received_before_failure(content: aiohttp.StreamReader) -> bytes:
    """What aiohttp had received, unread, when the connection failed: its reads raise the failure
    before they hand that over. Relies on aiohttp 3.14's ``StreamReader`` (pinned): the failure is
    its ``_exception``, and a read hands over the buffer only while none is set."""
    failure = content.exception()
    if failure is None or not content._buffer:
        return b""
    content._exception = None
    try:
        return content.read_nowait()
    finally:
        content._exception = failure
