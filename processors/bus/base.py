"""The bus protocol every backend implements.

A bus moves opaque bytes plus string headers between processes. It knows
nothing of request ids or schemas: those belong to the processor runtime.
What it does promise, on every backend, is at-least-once delivery to the
members of a consumer group, one acknowledgement per message.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from config.bus import BusSettings

_DEFAULTS = BusSettings()


class BusError(Exception):
    """Base class of every error the bus layer raises on purpose."""


class BusConfigError(BusError, ValueError):
    """The bus URL or its options are wrong; retrying will not help."""


class BusUnavailable(BusError, ConnectionError):
    """The broker could not be reached within the connect timeout."""


class MessageTooLarge(BusError, ValueError):
    """A body is larger than the bus's configured ``max_message_bytes``."""


@dataclass(frozen=True, slots=True)
class Message:
    """What a publisher hands to the bus and a recorder writes down."""

    topic: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    key: str | None = None


class Delivery(abc.ABC):
    """One received message, to be settled exactly once by ack or nack.

    ``attempt`` starts at 1 and grows each time the message comes back after a
    nack (on Pulsar also after an ack timeout). A redelivery caused by a
    consumer dying is not a failed attempt on every broker, so it may or may
    not count; nothing relies on it counting.
    """

    __slots__ = ("topic", "body", "headers", "key", "attempt", "_settled")

    def __init__(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str],
        key: str | None,
        attempt: int,
    ) -> None:
        self.topic = topic
        self.body = body
        self.headers = dict(headers)
        self.key = key
        self.attempt = attempt
        self._settled = False

    @property
    def settled(self) -> bool:
        return self._settled

    async def ack(self) -> None:
        """Mark the message done: it will not be delivered to this group again."""
        if self._settled:
            return
        self._settled = True
        await self._ack()

    async def nack(self) -> None:
        """Give the message back: it will be delivered again with ``attempt + 1``."""
        if self._settled:
            return
        self._settled = True
        await self._nack()

    @abc.abstractmethod
    async def _ack(self) -> None: ...

    @abc.abstractmethod
    async def _nack(self) -> None: ...

    def __repr__(self) -> str:
        return f"<Delivery {self.topic} attempt={self.attempt} key={self.key!r} {len(self.body)}B>"


class Subscription(abc.ABC):
    """A group member's stream of deliveries from one topic."""

    topic: str
    group: str

    @abc.abstractmethod
    async def receive(self) -> Delivery:
        """Wait for the next delivery. Raises ``BusError`` once closed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Leave the group. Deliveries not yet acked go to another member."""

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Delivery]:
        while True:
            try:
                yield await self.receive()
            except SubscriptionClosed:
                return

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SubscriptionClosed(BusError):
    """``receive`` was called on (or waiting in) a closed subscription."""


class Bus(abc.ABC):
    """Publish to topics and subscribe to them as a member of a group."""

    url: str
    max_message_bytes: int
    # The consume loop's rules for every consumer of this bus, set by connect() from its
    # BusSettings: where a topic's messages are dead-lettered (<topic><suffix>), and after
    # how many failed attempts (unless the consumer says otherwise).
    dead_letter_suffix: str = _DEFAULTS.dead_letter_suffix
    max_attempts: int = _DEFAULTS.max_attempts

    @abc.abstractmethod
    async def publish(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        key: str | None = None,
    ) -> None:
        """Send one message; returns once the broker has accepted it."""

    @abc.abstractmethod
    async def subscribe(self, topic: str, group: str) -> Subscription:
        """Join ``group`` on ``topic``. A new group starts from the oldest retained message."""

    async def listen(self, topic: str) -> Subscription:
        """Read every message of a topic that only this caller reads (a private reply topic).

        No other member will ever share the topic, so no group coordination
        is needed; backends where joining a group is slow override this.
        """
        return await self.subscribe(topic, f"{topic}.listener")

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every subscription and connection this bus opened."""

    def check_size(self, body: bytes) -> None:
        if len(body) > self.max_message_bytes:
            raise MessageTooLarge(
                f"message of {len(body)} bytes exceeds max_message_bytes={self.max_message_bytes}"
            )

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
