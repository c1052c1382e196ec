"""Clients that hang up at random moments of a request (Chat Completions, Responses or Messages), for
tests and ``bench/hang_ups.py``."""

from __future__ import annotations

import asyncio
import random
import re
import socket
import struct

from tests.aborts import protocol_request

_ERROR_LINE = re.compile(r"^(ERROR:|\S+ \S+ ERROR )|Task exception was never retrieved|^Traceback", re.M)


def alarming_lines(log: str) -> list[str]:
    """The lines of a server log that would page someone: ERROR records in Duet's format
    (``<date> <time> ERROR name: ...``) or uvicorn's (``ERROR:    ...``), asyncio's "Task exception
    was never retrieved", and tracebacks. A hang-up must produce none."""
    return [match.string[match.start() : match.string.find("\n", match.start())] for match in _ERROR_LINE.finditer(log)]


async def hang_up(port: int, rng: random.Random, api_key: str = "", protocol: str = "chat") -> None:
    """One request in ``protocol``, abandoned at a random moment: before the body is complete, right
    after it, or while (or before) the answer streams; 60 % streamed. Half close politely (FIN), half
    reset the connection (RST)."""
    stream = rng.random() < 0.6
    request = protocol_request(protocol, "hi", stream, api_key)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        moment = rng.random()
        if moment < 0.1:
            writer.write(request[: rng.randrange(1, len(request))])  # mid-request
            await writer.drain()
        else:
            writer.write(request)
            await writer.drain()
            if moment < 0.3:
                pass  # at once, before the run can start
            elif stream and moment < 0.7:
                wanted = rng.randrange(1, 3000)  # part of the stream
                received = 0
                while received < wanted:
                    chunk = await asyncio.wait_for(reader.read(4096), 2)
                    if not chunk:
                        break
                    received += len(chunk)
            else:
                await asyncio.sleep(rng.uniform(0, 0.6))
    finally:
        if rng.random() < 0.5:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        writer.close()


async def hang_ups(port: int, count: int, at_once: int, seed: int = 7, api_key: str = "", protocol: str = "chat") -> None:
    """``count`` hang-ups in ``protocol``, ``at_once`` at a time, reproducible from ``seed``."""
    rng = random.Random(seed)
    limit = asyncio.Semaphore(at_once)

    async def one(seed: int) -> None:
        async with limit:
            await hang_up(port, random.Random(seed), api_key, protocol)

    await asyncio.gather(*(one(rng.randrange(1 << 30)) for _ in range(count)))
