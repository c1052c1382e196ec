"""The SSE reader of the upstream client (``agents/upstream/_sse.py``) over aiohttp's own stream reader,
without sockets."""

from __future__ import annotations

import asyncio
import types
from typing import Any


def _chunked_response(chunks: list[bytes], failure: BaseException | None = None) -> Any:
    """What ``sse_data`` reads of a response (its body, through aiohttp's own stream reader), whose
    chunked body's ``chunks`` all arrived before the first read, then its end, or ``failure`` (the
    connection broke). Made inside the running loop."""
    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.streams import StreamReader

    loop = asyncio.get_running_loop()
    content = StreamReader(BaseProtocol(loop), 2**16, loop=loop)
    for chunk in chunks:
        content.begin_http_chunk_receiving()
        content.feed_data(chunk)
        content.end_http_chunk_receiving()
    if failure is None:
        content.feed_eof()
    else:
        content.set_exception(failure)
    return types.SimpleNamespace(content=content)


def _sse_events(chunks: list[bytes], one_chunk_at_a_time: bool) -> list[list[bytes]]:
    """What ``sse_data`` yields for a chunked body whose ``chunks`` all arrived before the first read."""
    from duet.agents.upstream._sse import sse_data

    async def main() -> list[list[bytes]]:
        return [events async for events in sse_data(_chunked_response(chunks), types.SimpleNamespace(awaiting_first_token=one_chunk_at_a_time))]

    return asyncio.run(main())


def test_sse_parser_handles_crlf_split_across_reads() -> None:
    stream = b"data: one\r\n\r\n: comment\r\n\r\ndata: two\r\n\r\ndata: [DONE]\r\n\r\n"
    for one_chunk_at_a_time in (True, False):
        for cut in range(1, len(stream)):  # every possible read boundary, CR|LF splits included
            events = _sse_events([stream[:cut], stream[cut:]], one_chunk_at_a_time)
            assert [data for batch in events for data in batch] == [b"one", b"two", b"[DONE]"], cut


def test_sse_parser_hands_on_the_first_chunk_before_reading_the_rest_of_a_burst() -> None:
    from duet.agents.upstream._sse import SINGLE_CHUNK_READS

    burst = [b"data: %d\n\n" % n for n in range(40)]
    # All at once when the caller wants whole reads: one read, one list.
    assert _sse_events(burst, one_chunk_at_a_time=False) == [[b"%d" % n for n in range(40)]]
    # Chunk by chunk while the caller waits for its first token, then the rest in one read.
    events = _sse_events(burst, one_chunk_at_a_time=True)
    assert events[:SINGLE_CHUNK_READS] == [[b"%d" % n] for n in range(SINGLE_CHUNK_READS)]
    assert events[SINGLE_CHUNK_READS:] == [[b"%d" % n for n in range(SINGLE_CHUNK_READS, 40)]]


def test_sse_parser_hands_on_what_arrived_before_the_connection_broke() -> None:
    """aiohttp raises a broken connection's error before it hands over what it had received: the
    events that arrived come first, then the error (whether reads take one chunk or all)."""
    import aiohttp
    from duet.agents.upstream._sse import sse_data

    async def read(one_chunk_at_a_time: bool, chunks: list[bytes]) -> tuple[list[bytes], BaseException | None]:
        response = _chunked_response(chunks, aiohttp.ClientPayloadError("Response payload is not completed"))
        received: list[bytes] = []
        try:
            async for events in sse_data(response, types.SimpleNamespace(awaiting_first_token=one_chunk_at_a_time)):
                received += events
        except aiohttp.ClientPayloadError as exc:
            return received, exc
        return received, None

    burst = [b"data: %d\n\n" % n for n in range(20)] + [b"data: cut sho"]
    for one_chunk_at_a_time in (True, False):
        received, error = asyncio.run(read(one_chunk_at_a_time, burst))
        assert received == [b"%d" % n for n in range(20)] and isinstance(error, aiohttp.ClientPayloadError)
    received, error = asyncio.run(read(True, []))  # nothing had arrived: the error at once
    assert received == [] and isinstance(error, aiohttp.ClientPayloadError)
