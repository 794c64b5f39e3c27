"""What a Kafka topic holds and how a consumer group keeps up with it, read without joining the group.

Both use a consumer with no group id, assigned partitions by hand: it commits
nothing and takes no partition from anyone, so reading a dead-letter topic or
a group's position changes nothing for the consumers that serve the topic.

A group's position is its committed offset per partition (the admin API's
OffsetFetch); what waits is the distance from there to the end of the
partition, on the request topic and on the group's retry topic (a nacked
message waits there, ``bus.py``). Where nothing was committed yet the group
starts from the oldest retained message, as ``subscribe`` does, so all of it
waits. The oldest waiting message's age is told by its timestamp, read at
the committed offset.

Tansu drops the connection on an OffsetFetch for "every partition" (a null
topic list), so the partitions are always named.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition


from ..base import BusError, GroupStatus, Retained
from . import topics as kafka_topics
from .groups import RETRY_INFIX
from .records import groupless_consumer, headers_of, timestamp_of

if TYPE_CHECKING:
    from .bus import KafkaBus


# How long a read waits for the broker to hand over records it said it holds, before giving up.
_STALL_S = 10.0


async def _partitions(bus: KafkaBus, topics: list[str]) -> list[TopicPartition]:
    known = await kafka_topics.partitions_of(await bus._admin_client(), topics)
    return [TopicPartition(topic, p) for topic in topics for p in known.get(topic, ())]


async def _read_from(
    consumer: AIOKafkaConsumer, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int], *, first_only: bool
) -> list:
    """The records from ``starts`` to the end of each partition, by partition then offset; with ``first_only``
    the first of each.

    ``ends`` (the broker's end offsets) is only where reading may stop, not a limit: a partition is
    done once its position reached it and a fetch brought nothing more. Tansu reports the end of a
    partition written in one batch of several records as the batch's first offset + 1.
    """
    wanted = {tp: start for tp, start in starts.items() if start < ends[tp]}
    if not wanted:
        return []
    consumer.assign(list(wanted))
    for tp, start in wanted.items():
        consumer.seek(tp, start)
    records: dict[TopicPartition, list] = {tp: [] for tp in wanted}
    open_ = set(wanted)
    stalled = time.monotonic() + _STALL_S
    while open_:
        batch = await consumer.getmany(*open_, timeout_ms=200)
        for tp, got in batch.items():
            if not got:
                continue
            if not first_only:
                records[tp].extend(got)
            elif not records[tp]:
                records[tp].append(got[0])
            stalled = time.monotonic() + _STALL_S
        for tp in list(open_):
            if (first_only and records[tp]) or (not batch.get(tp) and await consumer.position(tp) >= ends[tp]):
                open_.discard(tp)
        if open_ and time.monotonic() > stalled:
            raise BusError(f"kafka: reading {sorted(str(tp) for tp in open_)} stalled before their end")
    return [r for tp in sorted(records, key=lambda t: (t.topic, t.partition)) for r in records[tp]]


async def read_retained(bus: KafkaBus, topic: str) -> list[Retained]:
    """Every message ``topic`` holds, partition by partition; a topic the broker lacks holds none (and stays so)."""
    if topic not in set(await bus.list_topics()):
        return []
    consumer = groupless_consumer(bus)
    await consumer.start()
    try:
        tps = await _partitions(bus, [topic])
        if not tps:
            return []
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        records = await _read_from(consumer, starts, ends, first_only=False)
    finally:
        await consumer.stop()
    return [
        Retained(
            r.topic, r.value or b"", headers_of(r), r.key.decode("utf-8", "replace") if r.key is not None else None,
            timestamp_of(r), f"{r.partition}:{r.offset}",
        )
        for r in records
    ]


async def members_of(bus: KafkaBus, group: str) -> int:
    """How many members the broker lists in ``group`` (0: no such group, or an empty one)."""
    admin = await bus._admin_client()
    count = 0
    for response in await admin.describe_consumer_groups([group]):
        for described in response.to_object()["groups"]:
            if not described["error_code"]:
                count += len(described["members"])
    return count


async def group_status(bus: KafkaBus, topic: str, group: str) -> GroupStatus:
    """Members, lag per partition (request and retry topic), and the oldest waiting message's age."""
    existing = set(await bus.list_topics())
    topics = [t for t in (topic, f"{topic}{RETRY_INFIX}{group}") if t in existing]
    members = await members_of(bus, group)
    if not topics:
        return GroupStatus(topic, group, members=members, waiting=0, lag={})
    admin = await bus._admin_client()
    consumer = groupless_consumer(bus)
    await consumer.start()
    try:
        tps = await _partitions(bus, topics)
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        starts = {}
        for tp in tps:
            meta = committed.get(tp)
            offset = meta.offset if meta is not None and meta.offset >= 0 else begins[tp]
            starts[tp] = min(max(offset, begins[tp]), ends[tp])  # retention may have dropped what it points at
        lag = {f"{tp.topic}:{tp.partition}": ends[tp] - starts[tp] for tp in tps}  # see _read_from on Tansu
        firsts = await asyncio.wait_for(_read_from(consumer, starts, ends, first_only=True), _STALL_S * 2)
    finally:
        await consumer.stop()
    times = [t for t in (timestamp_of(r) for r in firsts) if t is not None]
    oldest = max(0.0, time.time() - min(times)) if times else None
    return GroupStatus(topic, group, members=members, waiting=sum(lag.values()), lag=lag, oldest_s=oldest)
