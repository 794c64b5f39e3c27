"""What each processor of the wiring has waiting and who serves it: ``ragbus status`` and ``GET /v1/status``.

For each processor, its request topic and consumer group: the group's live members, the
messages waiting for it (Kafka: committed-offset lag per partition, over the request topic
and the group's retry topic; Pulsar: the subscription's backlog, from the broker's metrics,
``[bus.pulsar] metrics_url``; memory: exact, but only for the bus of this process), the age of
the oldest waiting message where the backend tells it, and the dead letters not yet redriven.
With stores from the log, also each running replica's latest report of how far it has applied
its log (``processors/stores/reports.py``), and with sharded query hosts each shard's owners and
standbys drawn from those reports (``shard_status.py``).
"""

from __future__ import annotations

import asyncio
import logging

from ragbus.config.settings import Settings, lanes
from ragbus.bus import Bus, GroupStatus
from ragbus.bus.dead_letters import pending
from ragbus.schema import DecodeError, decode
from ragbus.schema.changelog import ReplicaReport
from ragbus.schema.http import PipelineStatus, ProcessorStatus
from ragbus.runtime.shard_status import shard_rows
from ragbus.schema.topics import REPLICAS_LOG

log = logging.getLogger(__name__)

# Topics asked about at once: each Kafka query starts a consumer of its own.
_AT_ONCE = 4


def wiring(settings: Settings, names: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(processor, topic, group) of every processor in the wiring, or of ``names``."""
    sections = settings.processors
    unknown = sorted(set(names or ()) - set(sections))
    if unknown:
        raise ValueError(f"no processor named {', '.join(unknown)} in the wiring (known: {', '.join(sections)})")
    return [(n, topic, group) for n in names or sections for topic, group in lanes(n, sections[n])]


async def statuses(bus: Bus, rows: list[tuple[str, str, str]]) -> PipelineStatus:
    """Each processor's group status and dead-letter count; each replica's report, and each shard's."""
    slots = asyncio.Semaphore(_AT_ONCE)

    async def one(name: str, topic: str, group: str) -> ProcessorStatus:
        async with slots:
            status: GroupStatus = await bus.group_status(topic, group)
            dead = len(await pending(bus, f"{topic}{bus.dead_letter_suffix}"))
        return ProcessorStatus(
            processor=name, topic=topic, group=group, members=status.members, waiting=status.waiting,
            lag=dict(status.lag) if status.lag is not None else None, oldest_s=status.oldest_s,
            dead_letters=dead,
        )

    topics = list(await asyncio.gather(*(one(*row) for row in rows)))
    known = await bus.list_topics()  # a broker without the replicas' log has no replica: it is not created
    replicas = await read_reports(bus) if known is None or REPLICAS_LOG in known else []
    return PipelineStatus(bus=bus.url, topics=topics, replicas=replicas, shards=shard_rows(replicas))


async def read_reports(bus: Bus, timeout_s: float = 10.0) -> list[ReplicaReport]:
    """Every running replica's latest report, by replica id."""
    latest: dict[str, bytes | None] = {}
    async with asyncio.timeout(timeout_s), await bus.read_log(REPLICAS_LOG) as reader:
        while not await reader.caught_up():
            record = await reader.next()
            latest[record.key] = record.body
    reports = []
    for key, body in sorted(latest.items()):
        if body is None:
            continue
        try:
            reports.append(decode(body, ReplicaReport))
        except DecodeError as exc:
            log.warning("%s: the report of %r is not one: %s", REPLICAS_LOG, key, exc)
    return reports
