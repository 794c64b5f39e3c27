"""Kafka backend (aiokafka).

Three things Kafka does not give for free, and how this module adds them:

- Per-message acks. Kafka only stores a committed offset per partition, so
  ``PartitionOffsets`` commits an offset only when it and every earlier
  message in that partition are done, however the handlers interleave.
- Nack and an attempt count. A nacked message is republished, with its key
  and ``attempt + 1`` in a header, to a retry topic private to the group
  (``<topic>.retry.<group>``), which every member also consumes; only then is
  the original marked done. Other groups never see the retry.
- Redelivery after a consumer dies. Offsets not committed when a member
  leaves (or is fenced) are read again by whoever gets the partition next.

``has_consumers`` asks the broker's group coordinator (``groups.py``).

Replies share one topic, ``SHARED_REPLY_TOPIC``: a Kafka topic outlives its
reader, so one private reply topic per caller would pile up on the broker
(and in every responder's producer metadata) with each ``ragbus ask``. A
caller reads one partition of it, picked at random, from its end; its
requests name ``<topic>#<partition>`` as their reply-to, and it skips other
callers' replies on that partition by request id. Old replies go with the
topic's retention ([bus.kafka] reply_topics).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError, KafkaError

from ragbus.config.bus import BusSettings, TopicLayout
from ragbus.schema.topics import REPLY_PREFIX

from .. import outage
from ..base import (
    Bus,
    BusError,
    BusUnavailable,
    Delivery,
    GroupStatus,
    LogReader,
    Retained,
    Subscription,
    TopicInfo,
)
from ..url import BusAddress
from . import client_log
from . import log as kafka_log
from . import backlog
from .assignment import KafkaMembership
from .records import groupless_consumer, headers_of, timestamp_of
from . import topics as kafka_topics
from .groups import RETRY_INFIX, consumers_of
from .offsets import PartitionOffsets

log = logging.getLogger(__name__)

ATTEMPT_HEADER = "x-ragbus-attempt"
SHARED_REPLY_TOPIC = f"{REPLY_PREFIX}shared"
PARTITION_MARK = "#"  # a reply-to address <topic>#<partition>; Kafka topic names cannot hold it


def retry_topic(topic: str, group: str) -> str:
    return f"{topic}{RETRY_INFIX}{group}"


class KafkaDelivery(Delivery):
    __slots__ = ("_offset", "_sub", "_tp", "_tracker")

    def __init__(self, sub: KafkaSubscription, record, tracker: PartitionOffsets) -> None:
        headers = headers_of(record)
        attempt = _parse_attempt(headers.pop(ATTEMPT_HEADER, None))
        key = record.key.decode("utf-8", "replace") if record.key is not None else None
        super().__init__(sub.topic, record.value or b"", headers, key, attempt, timestamp_of(record))
        self._sub = sub
        self._tp = TopicPartition(record.topic, record.partition)
        self._offset = record.offset
        self._tracker = tracker

    async def _ack(self) -> None:
        self._sub._finished(self._tp, self._tracker, self._offset)

    async def _nack(self) -> None:
        headers = dict(self.headers)
        headers[ATTEMPT_HEADER] = str(self.attempt + 1)
        await self._sub._bus.publish(retry_topic(self.topic, self._sub.group), self.body, headers, self.key)
        self._sub._finished(self._tp, self._tracker, self._offset)


def _parse_attempt(raw: str | None) -> int:
    try:
        return max(1, int(raw)) if raw is not None else 1
    except ValueError:
        return 1


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, sub: KafkaSubscription) -> None:
        self._sub = sub

    async def on_partitions_revoked(self, revoked) -> None:
        # Commit what is finished before another member takes the partition;
        # acks for messages still in flight are dropped and the new owner
        # reads them again (at least once).
        await self._sub._commit()
        for tp in revoked:
            self._sub._offsets.pop(tp, None)

    async def on_partitions_assigned(self, assigned) -> None:
        if assigned:
            self._sub._assigned.set()


class KafkaSubscription(Subscription):
    backend = "kafka"
    _bus: KafkaBus

    def __init__(self, bus: KafkaBus, topic: str, group: str) -> None:
        super().__init__(bus, topic, group)
        opts = bus.settings.kafka
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bus.address.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=opts.fetch_max_wait_ms,
            session_timeout_ms=opts.session_timeout_ms,
            heartbeat_interval_ms=opts.heartbeat_interval_ms,
            max_partition_fetch_bytes=max(1_048_576, bus.max_message_bytes + kafka_topics.FRAMING_BYTES),
            **bus.security,
        )
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._assigned = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self._commit_lock = asyncio.Lock()

    async def start(self, timeout: float) -> None:
        await self._bus.ensure_topics([self.topic, retry_topic(self.topic, self.group)])
        self._consumer.subscribe(
            [self.topic, retry_topic(self.topic, self.group)], listener=_Rebalance(self)
        )
        try:
            await asyncio.wait_for(self._consumer.start(), timeout)
            # Joining a group takes a rebalance; a subscription that returns
            # before it owns partitions would make "publish then receive" racy.
            await asyncio.wait_for(self._assigned.wait(), timeout)
        except TimeoutError:
            await self._consumer.stop()
            raise BusUnavailable(
                f"kafka group {self.group!r} got no partitions of {self.topic!r} within {timeout}s"
            ) from None
        except BaseException:  # cancelled while joining: leave the group, then propagate
            await asyncio.shield(self._consumer.stop())
            raise
        self._committer = asyncio.ensure_future(self._commit_periodically())

    async def _receive(self):
        # After close() this raises ConsumerStoppedError, which receive() reads as the end.
        return await self._consumer.getone()

    def _deliver(self, record) -> Delivery:
        tp = TopicPartition(record.topic, record.partition)
        tracker = self._offsets.get(tp)
        if tracker is None:
            tracker = self._offsets[tp] = PartitionOffsets()
        tracker.delivered(record.offset)
        return KafkaDelivery(self, record, tracker)

    def _finished(self, tp: TopicPartition, tracker: PartitionOffsets, offset: int) -> None:
        # A tracker replaced by a rebalance belongs to a past assignment: ignore.
        if self._offsets.get(tp) is tracker:
            tracker.done(offset)

    async def _commit(self) -> None:
        async with self._commit_lock:
            offsets = {tp: t.committable() for tp, t in self._offsets.items()}
            offsets = {tp: o for tp, o in offsets.items() if o is not None}
            if not offsets:
                return
            try:
                await self._consumer.commit(offsets)
            except KafkaError as exc:
                # Typically a rebalance in progress: the messages are read again.
                log.warning("kafka commit for group %s failed: %r", self.group, exc)
                return
            for tp, offset in offsets.items():
                tracker = self._offsets.get(tp)
                if tracker is not None:
                    tracker.committed = offset

    async def _commit_periodically(self) -> None:
        interval = self._bus.settings.kafka.commit_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self._commit()

    async def _close(self) -> None:
        if self._committer is not None:
            self._committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._committer
        with contextlib.suppress(Exception):
            await self._commit()
        await self._consumer.stop()


class _Read(Delivery):
    """A message read without a group: there is nothing to commit or redeliver."""

    __slots__ = ()

    async def _ack(self) -> None:
        pass

    async def _nack(self) -> None:
        pass


class KafkaListener(Subscription):
    """All partitions of a private topic, assigned directly: no group join, no rebalance wait."""

    backend = "kafka"
    _bus: KafkaBus

    def __init__(self, bus: KafkaBus, topic: str) -> None:
        super().__init__(bus, topic, "")
        self._consumer = groupless_consumer(bus)

    async def start(self) -> None:
        await self._bus.ensure_topics([self.topic])
        await self._consumer.start()
        try:
            known = await kafka_topics.partitions_of(await self._bus._admin_client(), [self.topic])
            self._consumer.assign([TopicPartition(self.topic, p) for p in known.get(self.topic) or [0]])
            await self._consumer.seek_to_beginning()
        except BaseException:
            await asyncio.shield(self._consumer.stop())
            raise

    async def _receive(self):
        return await self._consumer.getone()

    def _deliver(self, record) -> Delivery:
        headers = headers_of(record)
        key = record.key.decode("utf-8", "replace") if record.key is not None else None
        return _Read(self.topic, record.value or b"", headers, key, 1, timestamp_of(record))

    async def _close(self) -> None:
        await self._consumer.stop()


class KafkaReplyInbox(KafkaListener):
    """One partition of the shared reply topic, read from its end: where one caller's replies arrive."""

    def __init__(self, bus: KafkaBus, topic: str, partition: int) -> None:
        super().__init__(bus, topic)
        self.partition = partition

    async def start(self) -> None:
        await self._consumer.start()
        try:
            tp = TopicPartition(self.topic, self.partition)
            self._consumer.assign([tp])
            await self._consumer.seek_to_end(tp)
            # Resolved now, before the caller names this partition in a request: no reply is missed.
            await self._consumer.position(tp)
        except BaseException:
            await asyncio.shield(self._consumer.stop())
            raise


class KafkaBus(Bus):
    def __init__(self, url: str, address: BusAddress, settings: BusSettings) -> None:
        super().__init__(url, settings.max_message_bytes)
        self.address = address
        self.settings = settings
        opts = settings.kafka
        self.security = {
            "security_protocol": opts.security_protocol,
            "sasl_mechanism": opts.sasl_mechanism or "PLAIN",
            "sasl_plain_username": opts.sasl_plain_username,
            "sasl_plain_password": opts.sasl_plain_password,
        }
        if opts.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            self.security["ssl_context"] = create_ssl_context(
                cafile=opts.ssl_cafile, certfile=opts.ssl_certfile, keyfile=opts.ssl_keyfile
            )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=address.bootstrap,
            linger_ms=opts.linger_ms,
            max_request_size=settings.max_message_bytes + kafka_topics.FRAMING_BYTES,
            request_timeout_ms=int(settings.publish_timeout_s * 1000),
            **self.security,
        )
        self._known_topics: set[str] = set()
        self._admin: AIOKafkaAdminClient | None = None
        self._appender: AIOKafkaProducer | None = None  # log appends: acks=all (kafka/log.py), made on first use
        self._admin_lock = asyncio.Lock()
        self._ensure_lock = asyncio.Lock()
        self._outage: outage.Outage | None = None  # set once open: what this process knows of the broker

    @classmethod
    async def open(cls, url: str, address: BusAddress, settings: BusSettings) -> KafkaBus:
        bus = cls(url, address, settings)
        try:
            await asyncio.wait_for(bus._producer.start(), settings.connect_timeout_s)
        except (TimeoutError, KafkaConnectionError, OSError) as exc:
            with contextlib.suppress(Exception):
                await bus._producer.stop()
            raise BusUnavailable(
                f"kafka broker at {address.bootstrap} not reachable within "
                f"{settings.connect_timeout_s}s: {exc!r}"
            ) from None
        client_log.install_filters()
        bus._outage = outage.attach("kafka", [f"{h}:{p}" for h, p in address.hosts], bus._probe, settings)
        return bus

    async def _probe(self) -> None:
        """One metadata request answered by a broker of the cluster, on a connection of its own."""
        client = AIOKafkaClient(bootstrap_servers=self.address.bootstrap,
                                request_timeout_ms=int(self.settings.connect_timeout_s * 1000), **self.security)
        try:
            await asyncio.wait_for(client.bootstrap(), self.settings.connect_timeout_s)
        finally:
            await client.close()

    def unreachable(self) -> str | None:
        return None if self._outage is None else self._outage.describe()

    def layout(self, topic: str) -> TopicLayout:
        """How a topic is created, by its class, told by how ragbus names retry, dead-letter and reply topics."""
        return self.settings.kafka.layout_of(kafka_topics.topic_kind(topic, self.dead_letter_suffix))

    def consumer_topics(self, topic: str, group: str) -> list[str]:
        """``topic``, the group's retry topic and the dead-letter topic."""
        return [topic, retry_topic(topic, group), f"{topic}{self.dead_letter_suffix}"]

    async def ensure_topics(self, topics: list[str]) -> None:
        """Create missing topics with their class's layout, before anyone joins or publishes.

        Left to the broker, a topic would be auto-created with the broker's default
        partitions (one, on a stock Kafka), so replicas of a processor could not share it.
        """
        if all(t in self._known_topics for t in topics):
            return
        # One at a time: a thousand first publishes to a new topic ask the broker once, not a
        # thousand times over the one admin connection (which timed out under that load).
        async with self._ensure_lock:
            missing = [t for t in topics if t not in self._known_topics]
            if missing:
                await kafka_topics.create_missing(await self._admin_client(), {t: self.layout(t) for t in missing},
                                                  self.max_message_bytes)
                self._known_topics.update(missing)

    async def provision_topics(self, topics: list[str]) -> list[str]:
        self._check_open()
        created = await kafka_topics.create_missing(await self._admin_client(), {t: self.layout(t) for t in topics},
                                                    self.max_message_bytes)
        self._known_topics.update(topics)
        return created

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        self._check_open()
        return await kafka_topics.describe(await self._admin_client(), names, self.dead_letter_suffix)

    async def has_consumers(self, topic: str) -> bool | None:
        """Whether a group with a member reads ``topic``; None if the broker did not answer in time."""
        self._check_open()
        async def ask() -> bool | None:
            return await consumers_of(await self._admin_client(), topic)

        try:
            return await asyncio.wait_for(ask(), self.settings.connect_timeout_s)
        except Exception as exc:  # a time-out, no permission to describe groups...: cannot tell
            log.debug("kafka: cannot tell who consumes %r: %r", topic, exc)
            return None

    async def list_topics(self) -> list[str]:
        """Every topic on the broker but its internal ones (``__consumer_offsets`` and kin)."""
        self._check_open()
        return sorted(t for t in await (await self._admin_client()).list_topics() if not t.startswith("__"))

    async def group_status(self, topic: str, group: str) -> GroupStatus:
        """Members, committed-offset lag per partition and the oldest waiting message's age (``backlog.py``)."""
        self._check_open()
        return await backlog.group_status(self, topic, group)

    async def _read_retained(self, topic: str) -> list[Retained]:
        return await backlog.read_retained(self, topic)

    async def _append(self, topic: str, body: bytes | None, key: str, order_key: str,
                      headers: dict[str, str]) -> str:
        await self.ensure_topics([topic])
        producer = await self._log_producer()
        partitions = sorted(await producer.partitions_for(topic))
        sent = await producer.send_and_wait(
            topic, body, key=key.encode(), headers=[(k, v.encode()) for k, v in headers.items()],
            partition=kafka_log.partition_of(order_key, partitions),
        )
        return f"{sent.partition}:{sent.offset}"

    async def _log_producer(self) -> AIOKafkaProducer:
        async with self._admin_lock:
            if self._appender is None:
                producer = kafka_log.log_producer(self)
                await producer.start()
                self._appender = producer
            return self._appender

    async def _join_assignment(self, topic, group, partitions, metadata, assign, on_assigned, timeout):
        membership = KafkaMembership(self, topic, group, partitions, metadata=metadata, assign=assign,
                                     on_assigned=on_assigned)
        await membership.start(timeout)
        return membership

    async def _read_log(self, topic: str, after: str | None, partitions: frozenset[int] | None) -> LogReader:
        reader = kafka_log.KafkaLogReader(self, topic, partitions)
        await reader.start(after)
        return reader

    async def log_partitions(self, topic: str) -> int:
        self._check_open()
        self._check_log(topic)
        return len(await self._log_partitions(topic))

    async def partition_of(self, topic: str, order_key: str) -> int:
        self._check_open()
        self._check_log(topic)
        return kafka_log.partition_of(order_key, await self._log_partitions(topic))

    async def _log_partitions(self, topic: str) -> list[int]:
        await self.ensure_topics([topic])
        known = await kafka_topics.partitions_of(await self._admin_client(), [topic])
        return known.get(topic) or [0]

    async def _admin_client(self) -> AIOKafkaAdminClient:
        async with self._admin_lock:
            if self._admin is None:
                # aiokafka's own request time-out (40 s): topic creation may wait that long on a
                # loaded broker; has_consumers bounds its own wait with connect_timeout_s.
                admin = AIOKafkaAdminClient(bootstrap_servers=self.address.bootstrap, **self.security)
                await admin.start()
                self._admin = admin
            return self._admin

    async def _publish(self, topic: str, body: bytes, headers: dict[str, str], key: str | None) -> None:
        topic, partition = await self._destination(topic)
        # Once per topic and process, so the broker's auto-create does not pick the layout. A reply
        # topic exists already: its reader created it before any request named it.
        if topic not in self._known_topics and not topic.startswith(REPLY_PREFIX):
            await self.ensure_topics([topic])
        await self._producer.send_and_wait(
            topic,
            body,
            key=key.encode() if key is not None else None,
            headers=[(k, v.encode()) for k, v in headers.items()],
            partition=partition,
        )

    async def _destination(self, address: str) -> tuple[str, int | None]:
        """The topic and partition of a reply-to address ``<topic>#<partition>``; a plain topic is itself."""
        topic, mark, number = address.partition(PARTITION_MARK)
        if not mark:
            return topic, None
        if not topic.startswith(REPLY_PREFIX) or not number.isdigit():
            raise BusError(f"{address[:200]!r} is not a reply address (<reply topic>{PARTITION_MARK}<partition>)")
        if int(number) not in (await self._producer.partitions_for(topic) or ()):
            raise BusError(f"reply address {address[:200]!r} names a partition {topic!r} does not have")
        return topic, int(number)

    async def _reply_inbox(self, name: str) -> tuple[str, Subscription]:
        await self.ensure_topics([SHARED_REPLY_TOPIC])
        partitions = sorted(await self._producer.partitions_for(SHARED_REPLY_TOPIC) or {0})
        inbox = KafkaReplyInbox(self, SHARED_REPLY_TOPIC, random.choice(partitions))
        await inbox.start()
        return f"{SHARED_REPLY_TOPIC}{PARTITION_MARK}{inbox.partition}", inbox

    async def _subscribe(self, topic: str, group: str) -> Subscription:
        sub = KafkaSubscription(self, topic, group)
        await sub.start(timeout=max(30.0, self.settings.connect_timeout_s))
        return sub

    async def _listen(self, topic: str) -> Subscription:
        listener = KafkaListener(self, topic)
        await listener.start()
        return listener

    async def _close(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                await self._admin.close()
        if self._appender is not None:
            with contextlib.suppress(Exception):
                await self._appender.stop()
        try:
            await self._producer.stop()
        finally:
            if self._outage is not None:
                outage.detach(self._outage, self._probe)

