"""Log topics on Kafka: appended with every replica's acknowledgement, read by partition without a group.

A record's position is ``<partition>:<offset>``; a reader's checkpoint is the next offset of every
partition it reads (``0=12,1=40``). Records of one key go to one partition (the producer's
partitioner hashes the key), so they are read in the order they were appended. A record's partition is
that of its order key (``Bus.append``), hashed as the producer hashes keys. A log topic is
created compacted (``[bus.kafka] changelog_topics``): Kafka keeps the latest record of each key
and drops a key whose latest record is a tombstone (a record with no value).

Appends use a producer of their own, ``acks=all`` and idempotent: a log is the state it records,
so a record is acknowledged only once every in-sync replica holds it, and a retried send is
neither doubled nor reordered. Requests keep the faster one-replica acks of the bus's producer.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner


from ..base import BusError, LogReader, LogRecord
from . import topics as kafka_topics
from .records import groupless_consumer, headers_of, timestamp_of

if TYPE_CHECKING:
    from .bus import KafkaBus

_PARTITIONER = DefaultPartitioner()


def log_producer(bus: KafkaBus) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bus.address.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=bus.settings.kafka.linger_ms,
        max_request_size=bus.max_message_bytes + kafka_topics.FRAMING_BYTES,
        request_timeout_ms=int(bus.settings.publish_timeout_s * 1000),
        **bus.security,
    )


def partition_of(order_key: str, partitions: list[int]) -> int:
    """The partition of an order key: the producer's own hash of a key (murmur2), so a record whose
    order key is its key lands where a keyed publish would."""
    return _PARTITIONER(order_key.encode(), partitions, partitions)


def parse_position(position: str) -> tuple[int, int]:
    partition, colon, offset = position.partition(":")
    if not colon or not partition.isdigit() or not offset.isdigit():
        raise BusError(f"{position[:100]!r} is not a position of a kafka log (<partition>:<offset>)")
    return int(partition), int(offset)


def parse_checkpoint(checkpoint: str) -> dict[int, int]:
    """``0=12,1=40`` -> the next offset of each partition."""
    nexts: dict[int, int] = {}
    for part in filter(None, checkpoint.split(",")):
        partition, eq, offset = part.partition("=")
        if not eq or not partition.isdigit() or not offset.isdigit():
            raise BusError(f"{checkpoint[:100]!r} is not a checkpoint of a kafka log (<partition>=<offset>,...)")
        nexts[int(partition)] = int(offset)
    return nexts


class KafkaLogReader(LogReader):
    """Every partition of one topic (or ``partitions`` of it), assigned by hand, from a checkpoint or from
    the start."""

    def __init__(self, bus: KafkaBus, topic: str, partitions: frozenset[int] | None = None) -> None:
        self.topic = topic
        self._bus = bus
        self._partitions = partitions
        self._consumer: AIOKafkaConsumer = groupless_consumer(bus)
        self._next: dict[int, int] = {}  # partition -> offset of the next record to return
        self._tps: list[TopicPartition] = []
        self._ends: dict[int, int] | None = None  # the partitions' ends as last asked

    async def start(self, after: str | None) -> None:
        nexts = parse_checkpoint(after) if after is not None else {}
        await self._bus.ensure_topics([self.topic])
        await self._consumer.start()
        try:
            known = await kafka_topics.partitions_of(await self._bus._admin_client(), [self.topic])
            self._tps = [TopicPartition(self.topic, p) for p in known.get(self.topic) or [0]
                         if self._partitions is None or p in self._partitions]
            self._consumer.assign(self._tps)
            beginnings = await self._consumer.beginning_offsets(self._tps)
            for tp in self._tps:
                # A checkpoint older than what the broker still holds starts at what it holds: on a
                # compacted topic, the records removed were superseded ones.
                start = max(nexts.get(tp.partition, 0), beginnings[tp])
                self._consumer.seek(tp, start)
                self._next[tp.partition] = start
        except BaseException:
            await asyncio.shield(self._consumer.stop())
            raise

    async def next(self) -> LogRecord:
        record = await self._consumer.getone()
        self._next[record.partition] = record.offset + 1
        key = record.key.decode("utf-8", "replace") if record.key is not None else ""
        return LogRecord(self.topic, key, record.value, headers_of(record), timestamp_of(record),
                         f"{record.partition}:{record.offset}", record.partition)

    async def caught_up(self) -> bool:
        # Short of the end last seen, it is not caught up: the broker is asked again only once that
        # end is reached, so a reader catching up asks once, not once a record.
        if self._ends is not None and not self._reached(self._ends):
            return False
        self._ends = await self._own_ends()
        if self._reached(self._ends):
            return True
        # Offsets can be missing below the end (compacted away, a transaction's marker): the
        # consumer's position, which moves as records are returned, has passed them then.
        for tp in self._tps:
            position = await self._consumer.position(tp)
            self._next[tp.partition] = max(self._next[tp.partition], position)
        return self._reached(self._ends)

    async def behind(self) -> int | None:
        self._ends = await self._own_ends()
        return sum(max(0, end - self._next.get(p, 0)) for p, end in self._ends.items())

    async def _own_ends(self) -> dict[int, int]:
        """The ends of the partitions this reader reads."""
        ends = await kafka_topics.end_offsets(await self._bus._admin_client(), self.topic)
        return {p: end for p, end in ends.items() if p in self._next}

    def _reached(self, ends: dict[int, int]) -> bool:
        return all(self._next.get(p, 0) >= end for p, end in ends.items())

    def covers(self, position: str) -> bool:
        partition, offset = parse_position(position)
        if partition not in self._next:
            raise BusError(f"{self.topic!r} has no partition {partition} (position {position!r})")
        return self._next[partition] > offset

    def checkpoint(self) -> str:
        return ",".join(f"{p}={o}" for p, o in sorted(self._next.items()))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._consumer.stop()
