"""Receiving from a subscription with a bound, so a lost message fails a test instead of hanging it."""

from __future__ import annotations

import asyncio

from ragbus.bus import LogReader, LogRecord

RECEIVE_TIMEOUT = 20.0


async def receive(sub, timeout: float = RECEIVE_TIMEOUT):
    return await asyncio.wait_for(sub.receive(), timeout)


async def receive_until(sub, body: bytes, *, ack: bool = True):
    """Receive (and ack) until ``body`` arrives; return the bodies seen before it.

    On Kafka this proves something only for messages on the sentinel's partition:
    publish them with the sentinel's key.
    """
    seen = []
    while True:
        d = await receive(sub)
        if ack:
            await d.ack()
        if d.body == body:
            return seen
        seen.append(d.body)


async def read_to_end(reader: LogReader) -> list[LogRecord]:
    """Every record until the reader has caught up (records may be spread over partitions)."""
    got = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECEIVE_TIMEOUT
    while not await reader.caught_up():
        assert loop.time() < deadline, f"not caught up after {len(got)} records"
        got.append(await asyncio.wait_for(reader.next(), RECEIVE_TIMEOUT))
    return got
