"""A Kafka record read as the bus reads it, and the consumer that reads without a group.

Shared by the bus's consumers (``bus.py``), its log readers (``log.py``) and what reads a topic or a
group's position without joining it (``backlog.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer

from . import topics as kafka_topics

if TYPE_CHECKING:
    from .bus import KafkaBus


def headers_of(record) -> dict[str, str]:
    """A record's headers as text. Kafka allows a header without a value: read as "", not a crash of the
    consumer."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in (record.headers or ())}


def timestamp_of(record) -> float | None:
    """Seconds since the epoch, set by the producer (CreateTime) or the broker (LogAppendTime); None:
    unknown (-1 or none)."""
    ms = record.timestamp
    return ms / 1000 if ms is not None and ms >= 0 else None


def groupless_consumer(bus: KafkaBus) -> AIOKafkaConsumer:
    """A consumer in no group: it commits nothing and takes nothing from any group (readers, listeners)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bus.address.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=bus.settings.kafka.fetch_max_wait_ms,
        max_partition_fetch_bytes=max(1_048_576, bus.max_message_bytes + kafka_topics.FRAMING_BYTES),
        **bus.security,
    )
