"""The message bus: one async protocol, three backends chosen by URL.

    async with await connect("kafka://127.0.0.1:9092") as bus:
        await bus.publish("embed", b"...", {"request-id": "..."})
        sub = await bus.subscribe("embed", group="embed-workers")
        async for delivery in sub: ...

``consume`` runs a handler over a subscription with the retry and
dead-letter rules every processor shares.
"""

from __future__ import annotations

from ragbus.config.bus import BusSettings

from .assignment import Assign, Membership, OnAssigned
from .base import (
    AssignmentUnsupported,
    Bus,
    BusConfigError,
    BusError,
    BusUnavailable,
    Delivery,
    GroupStatus,
    LogReader,
    LogRecord,
    LogTopics,
    LogTopicsUnsupported,
    Message,
    MessageTooLarge,
    Retained,
    Subscription,
    SubscriptionClosed,
    TopicAdmin,
    TopicAdminUnsupported,
    TopicInfo,
    Unsupported,
)
from .consume import Undecodable, consume, dead_letter_topic
from .url import BusAddress, parse_bus_url

__all__ = [
    "Assign",
    "AssignmentUnsupported",
    "Bus",
    "BusAddress",
    "BusConfigError",
    "BusError",
    "BusSettings",
    "BusUnavailable",
    "Delivery",
    "GroupStatus",
    "LogReader",
    "LogRecord",
    "LogTopics",
    "LogTopicsUnsupported",
    "Membership",
    "Message",
    "MessageTooLarge",
    "OnAssigned",
    "Retained",
    "Subscription",
    "SubscriptionClosed",
    "TopicAdmin",
    "TopicAdminUnsupported",
    "TopicInfo",
    "Undecodable",
    "Unsupported",
    "connect",
    "consume",
    "dead_letter_topic",
    "parse_bus_url",
]


async def connect(url: str | None = None, settings: BusSettings | None = None) -> Bus:
    """Open a bus. ``url`` overrides ``settings.url``; no settings means ``BusSettings()``'s defaults.

    Settings are passed in, never read here: callers that honour files and
    ``RAGBUS_BUS__*`` variables load them (``ragbus.config.settings.load_settings``).

    Raises ``BusConfigError`` for a bad URL and ``BusUnavailable`` when the
    broker does not answer within ``settings.connect_timeout_s``.
    """
    settings = settings or BusSettings()
    url = url or settings.url
    address = parse_bus_url(url)
    bus: Bus
    if address.scheme == "memory":
        from .memory import MemoryBus

        bus = MemoryBus(
            url,
            address.name,
            max_message_bytes=settings.max_message_bytes,
            retention=settings.memory_retention,
            retention_bytes=settings.memory_retention_bytes,
            log_partitions=settings.memory_log_partitions,
        )
    elif address.scheme == "kafka":
        from .kafka.bus import KafkaBus

        bus = await KafkaBus.open(url, address, settings)
    else:
        from .pulsar.bus import PulsarBus

        bus = await PulsarBus.open(url, address, settings)
    bus.dead_letter_suffix = settings.dead_letter_suffix
    bus.max_attempts = settings.max_attempts
    return bus
