"""The bus protocol every backend implements.

A bus moves opaque bytes plus string headers between processes. It knows
nothing of request ids or schemas: those belong to the processor runtime.
What it does promise, on every backend, is at-least-once delivery to the
members of a consumer group, one acknowledgement per message.
"""

from __future__ import annotations

import abc
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ragbus.config.bus import BusSettings
from ragbus.schema.errors import RagbusError
from ragbus.schema.topics import CHANGELOG_PREFIX, REPLY_PREFIX, is_changelog

if TYPE_CHECKING:
    from .assignment import Assign, Membership, OnAssigned

_DEFAULTS = BusSettings()


class BusError(RagbusError):
    """Base class of every error the bus layer raises on purpose."""


class BusConfigError(BusError, ValueError):
    """The bus URL or its options are wrong; retrying will not help."""


class BusUnavailable(BusError, ConnectionError):
    """The broker could not be reached within the connect timeout."""

    retriable = True


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

    ``timestamp`` is when the message was published (epoch seconds), as the
    broker recorded it, or None where the backend has no such time. It is not
    when this consumer received it: a recorder that joins late reads a backlog
    in milliseconds, and only the publish times keep the gaps between messages.
    """

    __slots__ = ("_settled", "attempt", "body", "headers", "key", "timestamp", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str],
        key: str | None,
        attempt: int,
        timestamp: float | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.headers = dict(headers)
        self.key = key
        self.attempt = attempt
        self.timestamp = timestamp
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
    """A group member's stream of deliveries from one topic.

    ``receive`` and ``close`` hold the rules every backend shares, so a
    backend cannot get them subtly different: it only waits for the broker's
    next message (``_receive``), turns it into a delivery (``_deliver``) and
    releases its consumer (``_close``).
    """

    topic: str
    group: str
    backend: str = "bus"  # names the broker in error messages

    def __init__(self, bus: Bus, topic: str, group: str) -> None:
        self.topic = topic
        self.group = group
        self._bus = bus
        self._closed = False

    async def receive(self) -> Delivery:
        """Wait for the next delivery. Raises ``SubscriptionClosed`` once closed.

        Any other failure of the wait becomes a ``BusError``. A wait that ends
        because ``close()`` stopped the consumer is not a failure but the end
        of the stream, and a message that arrives while closing is not handed
        out: it was never acked, so the broker gives it to another member.
        """
        if self._closed:
            raise self._closed_error()
        try:
            raw = await self._receive()
        except Exception as exc:
            if self._closed:
                raise self._closed_error() from None
            raise BusError(f"{self.backend} receive from {self.topic!r} failed: {exc!r}") from exc
        if self._closed:
            raise self._closed_error()
        # No await between the check above and _deliver: a close (or a Kafka
        # rebalance) cannot slip in between registering the message and returning it.
        return self._deliver(raw)

    async def close(self) -> None:
        """Leave the group. Deliveries not yet acked go to another member."""
        if self._closed:
            return
        self._closed = True
        self._bus._subscriptions.discard(self)
        await self._close()

    @abc.abstractmethod
    async def _receive(self) -> Any:
        """Wait for the broker's next message (or for close); only its failure is a transport error."""

    @abc.abstractmethod
    def _deliver(self, raw: Any) -> Delivery:
        """Turn what ``_receive`` returned into a delivery, without awaiting anything."""

    @abc.abstractmethod
    async def _close(self) -> None: ...

    def _closed_error(self) -> SubscriptionClosed:
        return SubscriptionClosed(f"subscription to {self.topic!r} is closed")

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


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as the broker holds it (``Bus.describe_topics``)."""

    name: str
    kind: str  # request, retry, dead-letter or reply: told by how ragbus names topics
    partitions: int
    replication_factor: int
    retention_ms: int | None  # None: the broker reports none


@dataclass(frozen=True, slots=True)
class Retained:
    """One message a topic still holds, read without joining any group (``Bus.read_retained``).

    ``position`` names it on its topic for as long as the broker keeps it (Kafka
    ``partition:offset``, a Pulsar message id, the memory bus's sequence number).
    """

    topic: str
    body: bytes
    headers: Mapping[str, str]
    key: str | None
    timestamp: float | None  # publish time, epoch seconds; None where the backend has none
    position: str


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """How a consumer group keeps up with a topic (``Bus.group_status``); None: the backend cannot tell.

    ``waiting`` counts messages published and not yet finished by the group (Kafka: lag over
    the topic and the group's retry topic; Pulsar: the subscription's backlog); ``lag`` is
    the same by partition where the backend has partitions. ``oldest_s`` is the age in
    seconds of the oldest of them.
    """

    topic: str
    group: str
    members: int | None = None
    waiting: int | None = None
    lag: Mapping[str, int] | None = None
    oldest_s: float | None = None


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of a log topic (``Bus.read_log``); ``body`` None is a tombstone: its key is gone.

    ``position`` names the record on its topic; ``LogReader.covers`` tells whether a reader has
    returned the record at a position (one ``Bus.append`` gave, say).
    """

    topic: str
    key: str
    body: bytes | None
    headers: Mapping[str, str]
    timestamp: float | None  # publish time, epoch seconds; None where the backend has none
    position: str
    partition: int = 0  # of its topic: where its order key sent it (``Bus.partition_of``)


class LogReader(abc.ABC):
    """Every record of one log topic from a checkpoint on, in order per key, then followed as it grows.

    Read without a group: nothing is acknowledged or committed, and any number of readers
    each read all of it (a query replica materialising its stores is one). ``checkpoint``
    names what has been returned so far; ``Bus.read_log(topic, after=checkpoint)`` resumes
    right after it, in this process or a later one.
    """

    topic: str

    @abc.abstractmethod
    async def next(self) -> LogRecord:
        """Wait for the next record."""

    @abc.abstractmethod
    async def caught_up(self) -> bool:
        """Whether every record appended before this call has been returned."""

    @abc.abstractmethod
    def covers(self, position: str) -> bool:
        """Whether the record at ``position`` of this topic (and all before it, in its key's order)
        has been returned. A position this backend cannot read raises ``BusError``."""

    @abc.abstractmethod
    def checkpoint(self) -> str:
        """Where this reader stands: resume with ``read_log(topic, after=checkpoint())``."""

    async def behind(self) -> int | None:
        """How many records the topic holds now beyond those returned (at most: a compacted topic has
        gaps); None where the backend cannot count them and more are waiting."""
        return 0 if await self.caught_up() else None

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> LogReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Unsupported(BusError):
    """This backend lacks what was asked of it: one of the capabilities below, or reading without a group."""


class TopicAdminUnsupported(Unsupported):
    """This backend has no topics to provision or describe from a client."""


class LogTopicsUnsupported(Unsupported):
    """This backend has no log topics (``append``, ``read_log``)."""


class AssignmentUnsupported(Unsupported):
    """This backend has no group membership with an assignment of the caller's (``join_assignment``)."""


class LogTopics(Protocol):
    """A bus as the stores' replication uses it: log topics appended to and read, and whether the broker is
    reachable. Every ``Bus`` is one (on a backend without log topics, both calls refuse)."""

    url: str

    async def append(self, topic: str, body: bytes | None, *, key: str, order_key: str | None = None,
                     headers: Mapping[str, str] | None = None) -> str: ...

    async def read_log(self, topic: str, after: str | None = None, *,
                       partitions: Collection[int] | None = None) -> LogReader: ...

    async def partition_of(self, topic: str, order_key: str) -> int: ...

    def unreachable(self) -> str | None: ...


class TopicAdmin(Protocol):
    """A bus as an operator's tools use it (``ragbus status``, ``topics``, ``dlq``): topics and groups
    described, never joined. Every ``Bus`` is one (a backend without administration says it cannot tell)."""

    dead_letter_suffix: str

    async def has_consumers(self, topic: str) -> bool | None: ...

    def consumer_topics(self, topic: str, group: str) -> list[str]: ...

    async def provision_topics(self, topics: list[str]) -> list[str]: ...

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]: ...

    async def list_topics(self) -> list[str] | None: ...

    async def group_status(self, topic: str, group: str) -> GroupStatus: ...

    async def read_retained(self, topic: str) -> list[Retained]: ...


class Bus(abc.ABC):
    """Publish to topics and subscribe to them as a member of a group; a bus is also ``LogTopics`` and
    ``TopicAdmin``, the two capabilities a caller that needs no more asks for by name.

    The public methods hold the rules every backend shares (a closed bus
    refuses everything, an oversized body never reaches the broker, closing
    twice is harmless and closes every subscription first). A backend must
    implement ``_publish``, ``_subscribe`` and ``_close``; it overrides, where it
    can, ``_listen`` and ``_reply_inbox`` (when joining a group is slow on it),
    ``_append``, ``_read_log`` and ``_read_retained`` (log topics), and the admin
    calls (``has_consumers``, ``unreachable``, ``consumer_topics``,
    ``provision_topics``, ``describe_topics``, ``list_topics``, ``group_status``),
    whose defaults here refuse or say they cannot tell.
    """

    url: str
    max_message_bytes: int
    # The consume loop's rules for every consumer of this bus, set by connect() from its
    # BusSettings: where a topic's messages are dead-lettered (<topic><suffix>), and after
    # how many failed attempts (unless the consumer says otherwise).
    dead_letter_suffix: str = _DEFAULTS.dead_letter_suffix
    max_attempts: int = _DEFAULTS.max_attempts
    # Why provision_topics and describe_topics refuse, on a backend without topic administration.
    _no_topic_admin = "this bus has no topics to provision or describe"

    def __init__(self, url: str, max_message_bytes: int) -> None:
        self.url = url
        self.max_message_bytes = max_message_bytes
        self._subscriptions: set[Subscription] = set()
        self._log_readers: weakref.WeakSet[LogReader] = weakref.WeakSet()
        self._memberships: weakref.WeakSet[Membership] = weakref.WeakSet()
        self._closed = False

    async def publish(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        key: str | None = None,
    ) -> None:
        """Send one message; returns once the broker has accepted it."""
        self._check_open()
        self.check_size(body)
        await self._publish(topic, body, dict(headers or {}), key)

    async def subscribe(self, topic: str, group: str, *, keyed: bool = False) -> Subscription:
        """Join ``group`` on ``topic``. A new group starts from the oldest retained message.

        ``keyed``: messages with one key must reach one member (document-convert's parts). Kafka's
        partitions and the memory bus always do so; Pulsar does with a KeyShared subscription.
        """
        self._check_open()
        sub = await (self._subscribe_keyed(topic, group) if keyed else self._subscribe(topic, group))
        self._subscriptions.add(sub)
        return sub

    async def listen(self, topic: str) -> Subscription:
        """Read every message of a topic that only this caller reads."""
        self._check_open()
        sub = await self._listen(topic)
        self._subscriptions.add(sub)
        return sub

    async def reply_inbox(self, name: str) -> tuple[str, Subscription]:
        """Where a caller's responses arrive: the reply-to address its requests name, and what reads it.

        By default a private topic (``REPLY_PREFIX`` + ``name`` + a fresh id) read with
        ``listen``. A backend on which topics outlive their reader (Kafka) shares a few
        instead, so callers that come and go leave nothing behind; the subscription may
        then also carry other callers' responses, told apart by request id.
        """
        self._check_open()
        address, sub = await self._reply_inbox(name)
        self._subscriptions.add(sub)
        return address, sub

    async def has_consumers(self, topic: str) -> bool | None:
        """Whether a consumer group with a live member reads ``topic``: True, False, or None = cannot tell.

        Optional for a backend; this default cannot tell. A caller waiting for an answer asks
        it (``RequestClient(served_check_s=...)``) so that a request nobody will ever read
        fails in seconds, naming its topic, instead of after its whole time-out. A backend
        answers False only when it knows: an error or a slow broker is None, never False.
        """
        self._check_open()
        return None

    def unreachable(self) -> str | None:
        """While this process finds the broker unreachable, a sentence naming it and for how long; else None.

        Known from the clients' own failures (``outage.py``), so asking costs nothing. A broker-less
        backend is never unreachable.
        """
        return None

    def consumer_topics(self, topic: str, group: str) -> list[str]:
        """Every topic a consumer group reading ``topic`` uses on this backend: ``topic`` and its dead letters."""
        return [topic, f"{topic}{self.dead_letter_suffix}"]

    async def provision_topics(self, topics: list[str]) -> list[str]:
        """Create the missing ones of ``topics``, each with its class's layout; return the names created.

        Optional for a backend: one that creates topics on first use raises
        ``TopicAdminUnsupported`` saying so.
        """
        self._check_open()
        raise TopicAdminUnsupported(self._no_topic_admin)

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        """What the broker holds for ``names`` (every topic when None); a missing name is left out."""
        self._check_open()
        raise TopicAdminUnsupported(self._no_topic_admin)

    async def read_retained(self, topic: str) -> list[Retained]:
        """Every message ``topic`` holds now, oldest first, read without a group: no one else's
        share of the topic changes, nothing is acknowledged or committed. A topic the broker
        does not have holds nothing (and is not created, where the backend can avoid it)."""
        self._check_open()
        return await self._read_retained(topic)

    async def append(self, topic: str, body: bytes | None, *, key: str, order_key: str | None = None,
                     headers: Mapping[str, str] | None = None) -> str:
        """Add one record to a log topic (``topics.is_changelog``); returns its position once stored.

        ``body`` None is a tombstone: the key's record is removed, and where the broker compacts
        its log (Kafka's ``cleanup.policy=compact``, Pulsar's topic compaction) its earlier records
        go. Records of one ``order_key`` (by default their key) stay in the order they were
        appended: records that must never be compacted away take keys of their own and share an
        order key. Log topics are read with ``read_log``.
        """
        self._check_open()
        self._check_log(topic)
        if body is not None:
            self.check_size(body)
        return await self._append(topic, body, key, key if order_key is None else order_key, dict(headers or {}))

    async def read_log(self, topic: str, after: str | None = None, *,
                       partitions: Collection[int] | None = None) -> LogReader:
        """A reader of every record of ``topic``: from its start, or right after checkpoint ``after``.

        ``partitions``: only the records of those partitions of the topic (a shard's), each in its
        order; ``after`` is then a checkpoint of a reader of the same partitions. A backend whose log
        topics have no partitions refuses it (``LogTopicsUnsupported``).
        """
        self._check_open()
        self._check_log(topic)
        wanted = None if partitions is None else frozenset(partitions)
        if wanted is not None:
            count = await self.log_partitions(topic)
            if not wanted or not wanted <= set(range(count)):
                raise BusError(f"{topic!r} has partitions 0..{count - 1}; asked for {sorted(wanted)}")
        reader = await self._read_log(topic, after, wanted)
        self._log_readers.add(reader)
        return reader

    async def log_partitions(self, topic: str) -> int:
        """How many partitions the log topic ``topic`` has (made with its layout when it is missing)."""
        self._check_open()
        self._check_log(topic)
        raise LogTopicsUnsupported(f"{self.url}: log topics here have no partitions to read apart")

    async def partition_of(self, topic: str, order_key: str) -> int:
        """The partition of ``topic`` a record of ``order_key`` goes to (and every other of that order key)."""
        self._check_open()
        self._check_log(topic)
        raise LogTopicsUnsupported(f"{self.url}: log topics here have no partitions to read apart")

    async def join_assignment(self, topic: str, group: str, partitions: int, *, metadata: Callable[[], bytes],
                              assign: Assign, on_assigned: OnAssigned, timeout: float = 60.0) -> Membership:
        """Be a member of ``group`` on ``topic`` (of ``partitions``), owning what ``assign`` gives it.

        Whenever members come or go, one member runs ``assign`` over every member's ``metadata()``,
        and each member's ``on_assigned`` is awaited with its partitions and data (``bus/assignment.py``).
        Returns once the first assignment is known; ``close`` the membership to leave.
        """
        self._check_open()
        if partitions < 1:
            raise ValueError(f"a group's topic needs at least one partition, got {partitions}")
        membership = await self._join_assignment(topic, group, partitions, metadata, assign, on_assigned, timeout)
        self._memberships.add(membership)
        return membership

    async def _join_assignment(self, topic: str, group: str, partitions: int, metadata: Callable[[], bytes],
                               assign: Assign, on_assigned: OnAssigned, timeout: float) -> Membership:
        raise AssignmentUnsupported(f"{self.url}: no group membership with an assignment of the caller's here")

    async def list_topics(self) -> list[str] | None:
        """Every topic the broker knows, or None when this backend cannot list them."""
        self._check_open()
        return None

    async def group_status(self, topic: str, group: str) -> GroupStatus:
        """How ``group`` keeps up with ``topic``: its live members, what waits for it, how old that is.

        Optional for a backend; this default can tell nothing (every field None).
        """
        self._check_open()
        return GroupStatus(topic, group)

    async def close(self) -> None:
        """Close every subscription and connection this bus opened."""
        if self._closed:
            return
        self._closed = True
        for sub in list(self._subscriptions):
            await sub.close()
        for reader in list(self._log_readers):
            await reader.close()
        for membership in list(self._memberships):
            await membership.close()
        await self._close()

    def check_size(self, body: bytes) -> None:
        if len(body) > self.max_message_bytes:
            raise MessageTooLarge(
                f"message of {len(body)} bytes exceeds max_message_bytes={self.max_message_bytes}"
            )

    @staticmethod
    def _check_log(topic: str) -> None:
        if not is_changelog(topic):
            raise BusConfigError(f"{topic[:200]!r} is not a log topic: their names start with {CHANGELOG_PREFIX!r}")

    def _check_open(self) -> None:
        if self._closed:
            raise BusError("bus is closed")

    @abc.abstractmethod
    async def _publish(self, topic: str, body: bytes, headers: dict[str, str], key: str | None) -> None:
        """Hand one message to the broker; ``headers`` is the bus's own copy."""

    @abc.abstractmethod
    async def _subscribe(self, topic: str, group: str) -> Subscription: ...

    async def _subscribe_keyed(self, topic: str, group: str) -> Subscription:
        """A subscription whose members each get all the messages of the keys they get (``subscribe``'s
        ``keyed``): a backend whose groups always keep a key on one member subscribes as usual."""
        return await self._subscribe(topic, group)

    async def _reply_inbox(self, name: str) -> tuple[str, Subscription]:
        topic = f"{REPLY_PREFIX}{name}.{uuid.uuid4().hex[:16]}"
        return topic, await self._listen(topic)

    async def _listen(self, topic: str) -> Subscription:
        # No other member will ever share the topic, so a group of its own
        # does; backends where joining a group is slow override this.
        return await self._subscribe(topic, f"{topic}.listener")

    async def _append(self, topic: str, body: bytes | None, key: str, order_key: str, headers: dict[str, str]) -> str:
        raise LogTopicsUnsupported(f"{type(self).__name__} has no log topics")

    async def _read_log(self, topic: str, after: str | None, partitions: frozenset[int] | None) -> LogReader:
        raise LogTopicsUnsupported(f"{type(self).__name__} has no log topics")

    async def _read_retained(self, topic: str) -> list[Retained]:
        raise Unsupported(f"{type(self).__name__} cannot read a topic without a group")

    @abc.abstractmethod
    async def _close(self) -> None:
        """Release the backend's connections; every subscription is closed already."""

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
