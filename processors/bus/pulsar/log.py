"""Log topics on Pulsar: appended by the bus's producer, read with a Reader over the compacted view.

A record's position is its message id, ``<ledger>:<entry>:<batch>:<partition>``; on one topic
(ragbus's Pulsar topics are not partitioned) ids grow in the order the broker stored the
messages, so ``covers`` compares them. A checkpoint is the id of the last record returned
("" before any), and a reader resumes right after it. A tombstone is a message with an empty
payload and the key: what Pulsar's topic compaction reads as the key's removal. The reader
reads compacted (``is_read_compacted``): where the topic was compacted, it gets each key's
latest record up to the compaction horizon, then everything after it. Compaction runs when the
namespace's (or topic's) compaction threshold is passed, or when an operator asks for it
(``pulsar-admin topics compact``); without it the topic keeps every record, since the bus makes
a log topic's retention infinite before it first appends to or reads it (``retention.py``).
"""

from __future__ import annotations

import asyncio
import contextlib

import pulsar
import pulsar.asyncio as pulsar_async

from ..base import BusError, LogReader, LogRecord


def position_of(message_id) -> str:
    return f"{message_id.ledger_id()}:{message_id.entry_id()}:{message_id.batch_index()}:{message_id.partition()}"


def parse_position(position: str) -> tuple[int, int, int, int]:
    try:
        ledger, entry, batch, partition = (int(part) for part in position.split(":"))
    except ValueError:
        raise BusError(
            f"{position[:100]!r} is not a position of a pulsar log (<ledger>:<entry>:<batch>:<partition>)"
        ) from None
    return ledger, entry, batch, partition


class PulsarLogReader(LogReader):
    """A Pulsar Reader of one topic: no subscription is made or moved, nothing is acknowledged."""

    def __init__(self, topic: str, reader: pulsar_async.Reader, after: tuple[int, int, int, int] | None) -> None:
        self.topic = topic
        self._reader = reader
        self._last = after  # the last record returned (or resumed after); None: none yet

    @classmethod
    async def open(cls, client: pulsar_async.Client, full_name: str, topic: str, after: str | None) -> PulsarLogReader:
        start = parse_position(after) if after else None
        message_id = pulsar.MessageId.earliest if start is None else pulsar.MessageId(
            partition=start[3], ledger_id=start[0], entry_id=start[1], batch_index=start[2])
        try:
            reader = await client.create_reader(full_name, message_id, is_read_compacted=True)
        except pulsar_async.PulsarException as exc:
            raise BusError(f"pulsar reader of {topic!r} failed: {exc}") from exc
        return cls(topic, reader, start)

    async def next(self) -> LogRecord:
        try:
            m = await self._reader.read_next()
        except pulsar_async.PulsarException as exc:
            raise BusError(f"pulsar reader of {self.topic!r} failed: {exc}") from exc
        mid = m.message_id()
        self._last = (mid.ledger_id(), mid.entry_id(), mid.batch_index(), mid.partition())
        published_ms = m.publish_timestamp()
        return LogRecord(self.topic, m.partition_key() or "", m.data() or None, m.properties(),
                         published_ms / 1000 if published_ms > 0 else None, position_of(mid))

    async def caught_up(self) -> bool:
        try:
            return not await self._reader.has_message_available()
        except pulsar_async.PulsarException as exc:
            # Pulsar Lite answers "Topic has no messages" (as UnknownError) where Pulsar gives an
            # empty topic's last message id.
            if self._last is None and exc.error() == pulsar.Result.UnknownError:
                return True
            raise BusError(f"pulsar reader of {self.topic!r} failed: {exc}") from exc

    def covers(self, position: str) -> bool:
        ledger, entry, batch, _ = parse_position(position)
        return self._last is not None and (ledger, entry, batch) <= self._last[:3]

    def checkpoint(self) -> str:
        if self._last is None:
            return ""
        ledger, entry, batch, partition = self._last
        return f"{ledger}:{entry}:{batch}:{partition}"

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(self._reader.close())
