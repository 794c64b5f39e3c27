"""Record what is published on topics, and replay it onto any bus.

A recording is JSON Lines, one message per line, so it diffs and reviews
well as a test fixture: ``{"time": ..., "topic": ..., "key": ..., "headers":
{...}, "body": "<base64>"}``. The recorder joins each topic as a fresh
consumer group, so it sees every retained message and everything published
while it runs, without taking work from the real consumers.

``time`` is when the message was published, from the broker where the
backend has it (``Delivery.timestamp``), so ``replay(speed=...)`` keeps the
real gaps: the recorder reads a retained backlog in milliseconds, and its
receive times would squash hours into an instant. Only a backend without
publish times falls back to the receive time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import msgspec

from ..bus import Bus


class Recorded(msgspec.Struct, kw_only=True):
    time: float
    topic: str
    body: bytes
    headers: dict[str, str] = {}
    key: str | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Recorded)


def read_recording(path: str | Path) -> Iterator[Recorded]:
    """Yield the messages of a recording; a bad line raises ``ValueError`` naming it."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield _decoder.decode(line)
            except msgspec.DecodeError as exc:
                raise ValueError(f"{path}:{number}: not a recorded message: {exc}") from None


async def record(
    bus: Bus,
    topics: Sequence[str],
    path: str | Path,
    *,
    stop: asyncio.Event | None = None,
    limit: int | None = None,
    idle_timeout: float | None = None,
    on_message: Callable[[Recorded], None] | None = None,
) -> int:
    """Append every message on ``topics`` to ``path`` until ``stop``, ``limit`` or idleness.

    Each message is written and flushed before it is acked, so a recorder
    that dies loses nothing (its group would redeliver). Returns the count.
    """
    if not topics:
        raise ValueError("record needs at least one topic")
    stop = stop or asyncio.Event()
    group = f"ragbus-recorder-{uuid.uuid4().hex[:12]}"
    subs = [await bus.subscribe(t, group) for t in topics]
    queue: asyncio.Queue = asyncio.Queue(maxsize=1000)

    async def pump(sub) -> None:
        while True:
            await queue.put(await sub.receive())

    pumps = [asyncio.ensure_future(pump(s)) for s in subs]
    stopping = asyncio.ensure_future(stop.wait())
    count = 0
    try:
        # A local file: its open, like the write and flush below, is one short syscall; a thread would cost more.
        with open(path, "ab") as out:  # noqa: ASYNC230
            while limit is None or count < limit:
                getting = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait(
                    {getting, stopping, *pumps}, timeout=idle_timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if getting not in done:
                    getting.cancel()
                    for p in pumps:
                        if p in done:
                            p.result()  # a receive failure: surface it
                    break
                d = getting.result()
                published = d.timestamp if d.timestamp is not None else time.time()
                item = Recorded(time=published, topic=d.topic, body=d.body, headers=dict(d.headers), key=d.key)
                out.write(_encoder.encode(item) + b"\n")
                out.flush()
                await d.ack()
                count += 1
                if on_message is not None:
                    on_message(item)
    finally:
        stopping.cancel()
        for p in pumps:
            p.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for s in subs:
            await s.close()
    return count


async def replay(
    bus: Bus,
    path: str | Path,
    *,
    rename: Mapping[str, str] | None = None,
    speed: float | None = None,
    on_message: Callable[[Recorded], None] | None = None,
) -> int:
    """Publish a recording's messages in their recorded order. Returns the count.

    ``rename`` maps recorded topic names to the ones to publish on. With
    ``speed`` the recorded gaps between messages are kept, divided by it
    (2.0 replays twice as fast); without it messages go out back to back.
    """
    rename = rename or {}
    if speed is not None and speed <= 0:
        raise ValueError(f"speed must be > 0, got {speed}")
    count = 0
    first_recorded: float | None = None
    started = 0.0  # set with first_recorded
    for item in read_recording(path):
        if speed is not None:
            if first_recorded is None:
                first_recorded, started = item.time, time.monotonic()
            due = started + (item.time - first_recorded) / speed
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await bus.publish(rename.get(item.topic, item.topic), item.body, item.headers, item.key)
        count += 1
        if on_message is not None:
            on_message(item)
    return count
