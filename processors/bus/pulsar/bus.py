"""Pulsar backend (pulsar-client's asyncio API).

Pulsar already has what the bus promises: per-message acks, negative acks
with a redelivery count, and redelivery to another consumer of the
subscription when one closes or dies. A consumer group is a subscription,
of type Shared by default (``PulsarOptions.subscription_type``): members
split the topic round robin. KeyShared, a setting, also keeps messages with
the same key in order on one member; a processor that needs a key on one
member (document-convert) subscribes KeyShared whatever the setting.

The hot path (publish, receive, ack: about a dozen of each per hybrid query)
calls the client's core (``_pulsar``) rather than ``pulsar.asyncio``, which
for every call makes a future that the core resolves through
``call_soon_threadsafe``: a wake-up of the event loop and, from the core's
network thread, a hand-off of the GIL. An ack is taken at once by the core's
ack tracker (grouped and sent within ``ackGroupingTime``, confirmed by the
broker in neither API), so it needs no future. Nothing is pulled: each
consumer's messages are pushed by the core's listener thread into an inbox
on the loop (``inbox.py``), because the core's pull (``receive(0)``,
``receive_async``) tries its queue with a timed wait that held the loop
~0.1 ms whenever the queue was empty: every receive at concurrency 1, right
before a handler starts and a caller resumes. A publish still awaits the
broker's receipt, but without making a message id the bus does not use; a
callback the core makes at once, on the loop's own thread, settles inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import uuid

import _pulsar
import pulsar
import pulsar.asyncio as pulsar_async

from ragbus.config.bus import BusSettings
from ragbus.schema.topics import REPLICAS_LOG

from .. import outage
from ..base import Bus, BusError, BusUnavailable, Delivery, GroupStatus, LogReader, Retained, Subscription
from ..url import BusAddress
from . import core_log
from . import log as pulsar_log
from . import retention as pulsar_retention
from . import stats as pulsar_stats
from .inbox import Inbox

log = logging.getLogger(__name__)

_BYTES = pulsar.schema.BytesSchema()
PROBE_TOPIC = "ragbus.probe"  # looked up, never used, while the broker is unreachable (outage.py)
_CONSUMER_TYPES = {
    "KeyShared": pulsar.ConsumerType.KeyShared,
    "Shared": pulsar.ConsumerType.Shared,
}


class PulsarDelivery(Delivery):
    __slots__ = ("_consumer", "_message")

    def __init__(self, topic: str, consumer: _pulsar.Consumer, message: _pulsar.Message) -> None:
        key = message.partition_key() or None
        published_ms = message.publish_timestamp()  # stamped by the producer at send (ms); 0 when unknown
        super().__init__(
            topic,
            message.data(),
            message.properties(),
            key,
            message.redelivery_count() + 1,
            published_ms / 1000 if published_ms > 0 else None,
        )
        self._consumer = consumer
        self._message = message

    async def _ack(self) -> None:
        # Returns at once: the core's ack tracker queues the ack and answers without the broker
        # (the awaitable API waits for the same answer, through the event loop).
        self._consumer.acknowledge(self._message)

    async def _nack(self) -> None:
        # Synchronous in the client: it schedules redelivery after the delay.
        self._consumer.negative_acknowledge(self._message)


class PulsarSubscription(Subscription):
    backend = "pulsar"

    def __init__(self, bus: PulsarBus, topic: str, group: str, consumer: pulsar_async.Consumer, inbox: Inbox) -> None:
        super().__init__(bus, topic, group)
        self._consumer = consumer
        self._core: _pulsar.Consumer = consumer._consumer
        self._inbox = inbox

    async def _receive(self) -> _pulsar.Message:
        # Pushed by the core's listener (inbox.py): no call into the core here, whose
        # receive first tries its queue with a timed wait that holds the loop when it is empty.
        return await self._inbox.get()

    def _deliver(self, message: _pulsar.Message) -> Delivery:
        return PulsarDelivery(self.topic, self._core, message)

    async def _close(self) -> None:
        self._inbox.close()
        with contextlib.suppress(Exception):
            await self._consumer.close()


def _resolve(future: asyncio.Future, loop_thread: int, result: _pulsar.Result, value) -> None:
    """The core's callback for a publish or a subscribe: settle ``future`` on its loop.

    The core calls it on its own thread, or at once on the caller's (a send it fails before it is
    queued, for instance); called on ``loop_thread``, the loop's own, it settles at once, where
    ``call_soon_threadsafe`` would cost a wake-up of the loop for nothing.
    """
    if threading.get_ident() == loop_thread:
        _settle(future, result, value)
    else:
        future.get_loop().call_soon_threadsafe(_settle, future, result, value)


def _subscribed(future: asyncio.Future, loop_thread: int, value) -> None:
    """The core's answer to ``subscribe_async_v2``: a consumer, or an ``_pulsar.Error``."""
    if isinstance(value, _pulsar.Error):
        _resolve(future, loop_thread, value.error, None)
    else:
        _resolve(future, loop_thread, _pulsar.Result.Ok, value)


def _settle(future: asyncio.Future, result: _pulsar.Result, value) -> None:
    if future.done():  # the awaiting call was cancelled
        return
    if result == _pulsar.Result.Ok:
        future.set_result(value)
    else:
        future.set_exception(pulsar_async.PulsarException(result))


class _SharedClient:
    """One pulsar client per process and service: buses share its connections and id counter."""

    def __init__(self, client: pulsar_async.Client, ready: asyncio.Future[None]) -> None:
        self.client = client
        self.users = 0
        self.ready = ready  # done once the consumer ids are spread


_CLIENTS: dict[tuple, _SharedClient] = {}


async def _spread_consumer_ids(client: pulsar_async.Client, count: int) -> None:
    if count <= 0:
        return
    topics = [f"non-persistent://public/default/ragbus-id-spread-{i}" for i in range(count)]
    # A name of its own: Pulsar Lite drops the whole connection when two
    # processes spreading at once collide on one exclusive subscription.
    consumer = await client.subscribe(topics, f"ragbus-id-spread-{uuid.uuid4().hex}")
    await consumer.close()


class PulsarBus(Bus):
    _no_topic_admin = (
        "Pulsar creates a topic on first use; its partitions and retention are namespace policies "
        "an operator sets with pulsar-admin (ragbus topics provisions Kafka topics)"
    )

    def __init__(self, url: str, address: BusAddress, settings: BusSettings, client) -> None:
        super().__init__(url, settings.max_message_bytes)
        self.address = address
        self.settings = settings
        self._shared = client
        self._client = client.client
        self._producers: dict[str, asyncio.Future[pulsar_async.Producer]] = {}
        self._kept: dict[str, asyncio.Future[None]] = {}  # log topics known to be kept whole
        self._stats_lock = asyncio.Lock()
        self._stats_cache: tuple[float, pulsar_stats.BrokerStats] | None = None
        self._outage: outage.Outage | None = None  # set once open: what this process knows of the broker

    @classmethod
    async def open(cls, url: str, address: BusAddress, settings: BusSettings) -> PulsarBus:
        host, port = address.hosts[0]
        timeout = settings.connect_timeout_s
        # The client connects lazily and retries for its whole operation
        # timeout; probing first turns a wrong address into a prompt error.
        try:
            await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (TimeoutError, OSError) as exc:
            raise BusUnavailable(f"pulsar broker at {host}:{port} not reachable within {timeout}s: {exc!r}") from None
        opts = settings.pulsar
        kwargs: dict[str, object] = {
            "operation_timeout_seconds": opts.operation_timeout_seconds,
            "connection_timeout_ms": int(timeout * 1000),
            "logger": core_log.client_logger(),
        }
        if opts.auth_token:
            kwargs["authentication"] = pulsar.AuthenticationToken(opts.auth_token)
        if opts.tls_trust_certs_file_path:
            kwargs["tls_trust_certs_file_path"] = opts.tls_trust_certs_file_path
        if opts.tls_allow_insecure_connection:
            kwargs["tls_allow_insecure_connection"] = True
        service_url = f"{address.scheme}://{host}:{port}"
        # Buses share a client only when every option that shaped it is the same.
        shaping = tuple(sorted((k, repr(v)) for k, v in kwargs.items() if k not in ("authentication", "logger")))
        ident = (service_url, shaping, opts.auth_token, opts.consumer_id_spread, asyncio.get_running_loop())
        shared = _CLIENTS.get(ident)
        if shared is None:
            client = pulsar_async.Client(service_url, **kwargs)
            spread = (os.getpid() % 128) * opts.consumer_id_spread
            ready = asyncio.ensure_future(_spread_consumer_ids(client, spread))
            shared = _CLIENTS[ident] = _SharedClient(client, ready)
        shared.users += 1
        bus = cls(url, address, settings, shared)
        try:
            await asyncio.shield(shared.ready)
        except Exception as exc:
            await bus.close()
            raise BusUnavailable(f"pulsar broker at {host}:{port} refused the client: {exc!r}") from None
        bus._outage = outage.attach(address.scheme, [f"{host}:{port}"], bus._probe, settings)
        return bus

    async def _probe(self) -> None:
        """One lookup answered by the broker (a topic's partitions; nothing is created), on the shared client."""
        topic = self._full_name(PROBE_TOPIC)
        await asyncio.wait_for(self._client.get_topic_partitions(topic), self.settings.connect_timeout_s)

    def unreachable(self) -> str | None:
        return None if self._outage is None else self._outage.describe()

    def _full_name(self, topic: str) -> str:
        opts = self.settings.pulsar
        return f"persistent://{opts.tenant}/{opts.namespace}/{topic}"

    async def _producer(self, topic: str) -> pulsar_async.Producer:
        future = self._producers.get(topic)
        if future is None:
            future = self._producers[topic] = asyncio.ensure_future(
                self._client.create_producer(
                    self._full_name(topic),
                    batching_enabled=False,
                    block_if_queue_full=True,
                    send_timeout_millis=int(self.settings.publish_timeout_s * 1000),
                )
            )
        try:
            return await asyncio.shield(future)
        except Exception:
            # Do not cache a failure: the next publish tries again.
            if self._producers.get(topic) is future:
                del self._producers[topic]
            raise

    async def _publish(self, topic: str, body: bytes, headers: dict[str, str], key: str | None) -> None:
        producer = await self._producer(topic)
        builder = _pulsar.MessageBuilder()
        builder.content(body)
        builder.properties(headers)
        if key is not None:
            builder.partition_key(key)
        future = asyncio.get_running_loop().create_future()
        producer._producer.send_async(builder.build(), functools.partial(_resolve, future, threading.get_ident()))
        try:
            await future  # the broker's receipt
        except pulsar_async.PulsarException as exc:
            raise BusError(f"pulsar publish to {topic!r} failed: {exc}") from exc

    async def _subscribe_keyed(self, topic: str, group: str) -> Subscription:
        # A Shared subscription hands a key's messages round robin to every member: KeyShared keeps them on one.
        return await self._subscribe(topic, group, subscription_type="KeyShared")

    async def _subscribe(self, topic: str, group: str, subscription_type: str = "") -> Subscription:
        opts = self.settings.pulsar
        subscription_type = subscription_type or opts.subscription_type
        try:
            consumer_type = _CONSUMER_TYPES[subscription_type]
        except KeyError:
            raise BusError(
                f"unknown pulsar subscription_type {subscription_type!r}; use one of {sorted(_CONSUMER_TYPES)}"
            ) from None
        loop = asyncio.get_running_loop()
        # What the consumer holds beyond its running handlers stays receiver_queue_size: half waits
        # in the core's queue (prefetched), half on the loop before the listener is paused.
        inbox = Inbox(loop, max(1, opts.receiver_queue_size // 2))
        conf = _pulsar.ConsumerConfiguration()  # what pulsar.asyncio's subscribe builds, plus the listener
        conf.consumer_type(consumer_type)
        conf.receiver_queue_size(max(1, opts.receiver_queue_size - opts.receiver_queue_size // 2))
        conf.negative_ack_redelivery_delay_ms(opts.negative_ack_redelivery_delay_ms)
        conf.subscription_initial_position(pulsar.InitialPosition.Earliest)
        conf.schema(_BYTES.schema_info())
        conf.message_listener(inbox.listener)
        future = loop.create_future()
        self._client._client.subscribe_async_v2(
            self._full_name(topic), group, conf, functools.partial(_subscribed, future, threading.get_ident())
        )
        try:
            core = await future
        except pulsar_async.PulsarException as exc:
            inbox.close()
            raise BusError(f"pulsar subscribe to {topic!r} as {group!r} failed: {exc}") from exc
        return PulsarSubscription(self, topic, group, pulsar_async.Consumer(core, _BYTES), inbox)

    async def has_consumers(self, topic: str) -> bool | None:
        """Cannot tell: the binary protocol a client speaks has no call that lists a topic's
        subscriptions, and Pulsar Lite has no admin (HTTP) API. A caller's time-out says
        instead which topic went unanswered, and asks whether a worker runs on this bus."""
        self._check_open()
        return None

    async def _append(self, topic: str, body: bytes | None, key: str, order_key: str,
                      headers: dict[str, str]) -> str:
        # ragbus's Pulsar topics have one partition: every record is in order, whatever its order key.
        producer = await self._producer(topic)  # made first: the topic must exist for its policy
        await self._keep_whole(topic)
        try:
            # An empty payload is how Pulsar's compaction knows a tombstone.
            message_id = await producer.send(body or b"", headers, partition_key=key)
        except pulsar_async.PulsarException as exc:
            raise BusError(f"pulsar append to {topic!r} failed: {exc}") from exc
        return pulsar_log.position_of(message_id)

    async def _read_log(self, topic: str, after: str | None, partitions: frozenset[int] | None) -> LogReader:
        # (``partitions`` is always None here: these log topics have none, and log_partitions says so.)
        reader = await pulsar_log.PulsarLogReader.open(self._client, self._full_name(topic), topic, after)
        try:
            await self._keep_whole(topic)
        except BaseException:
            await reader.close()
            raise
        return reader

    async def _keep_whole(self, topic: str) -> None:
        """Once a bus per log topic: until Pulsar keeps it whole ([bus.pulsar] keep_logs, retention.py)."""
        # The replicas' reports are sent again every few seconds: a lost one is not state, and
        # `ragbus status` reads them without needing the admin API.
        if not self.settings.pulsar.keep_logs or topic == REPLICAS_LOG:
            return
        future = self._kept.get(topic)
        if future is None:
            # An operation of the broker's, like a subscribe: its policy travels on a system topic it may
            # first have to create, so it waits as long ([bus.pulsar] operation_timeout_seconds).
            future = self._kept[topic] = asyncio.ensure_future(pulsar_retention.keep_whole(
                self.settings.pulsar, self.address, topic, self.settings.pulsar.operation_timeout_seconds))
        try:
            await asyncio.shield(future)
        except Exception:
            if self._kept.get(topic) is future:  # not cached: the next append or reader asks again
                del self._kept[topic]
            raise

    async def _read_retained(self, topic: str) -> list[Retained]:
        # A reader: no subscription is made or moved, nothing is acknowledged.
        try:
            reader = await self._client.create_reader(self._full_name(topic), pulsar.MessageId.earliest)
        except pulsar_async.PulsarException as exc:
            raise BusError(f"pulsar reader of {topic!r} failed: {exc}") from exc
        read: list[Retained] = []
        try:
            while await self._more(reader, first=not read):
                m = await reader.read_next()
                published_ms = m.publish_timestamp()
                read.append(Retained(
                    topic, m.data(), m.properties(), m.partition_key() or None,
                    published_ms / 1000 if published_ms > 0 else None, str(m.message_id()),
                ))
        finally:
            with contextlib.suppress(Exception):
                await reader.close()
        return read

    async def _more(self, reader, *, first: bool) -> bool:
        try:
            return await reader.has_message_available()
        except pulsar_async.PulsarException as exc:
            # Pulsar Lite answers "Topic has no messages" (as UnknownError) where Pulsar gives an empty
            # topic's last message id: on the first ask only, that is an empty topic.
            if first and exc.error() == pulsar.Result.UnknownError:
                return False
            raise BusError(f"pulsar reader of {reader.topic()!r} failed: {exc}") from exc

    async def _stats(self) -> pulsar_stats.BrokerStats | None:
        """The broker's gauges, fetched at most once a second: ``ragbus status`` asks per topic, and the
        broker refreshes them only every few seconds anyway."""
        opts = self.settings.pulsar
        if not opts.metrics_url:
            return None
        async with self._stats_lock:
            now = asyncio.get_running_loop().time()
            if self._stats_cache is None or now - self._stats_cache[0] > 1.0:
                stats = await pulsar_stats.scrape(  # a broker's answer, however loaded it is: as long as its operations
                    opts.metrics_url, f"{opts.tenant}/{opts.namespace}", opts.operation_timeout_seconds
                )
                self._stats_cache = (now, stats)
            return self._stats_cache[1]

    async def list_topics(self) -> list[str] | None:
        """The topics the broker's metrics name ([bus.pulsar] metrics_url); None without it."""
        self._check_open()
        stats = await self._stats()
        return None if stats is None else sorted(stats.topics)

    async def group_status(self, topic: str, group: str) -> GroupStatus:
        """The subscription's backlog and connected consumers, from the broker's metrics
        ([bus.pulsar] metrics_url; nothing without it). No partitions, no message ages:
        the gauges do not say."""
        self._check_open()
        stats = await self._stats()
        if stats is None:
            return GroupStatus(topic, group)
        found = stats.of(topic, group)
        if found is None:  # no such subscription (yet): no member; what it would read first is not reported
            return GroupStatus(topic, group, members=0)
        return GroupStatus(topic, group, members=found.consumers, waiting=found.backlog)

    async def _close(self) -> None:
        try:
            await self._close_clients()
        finally:
            if self._outage is not None:
                outage.detach(self._outage, self._probe)

    async def _close_clients(self) -> None:
        for future in self._producers.values():
            if future.done() and not future.exception():
                with contextlib.suppress(Exception):
                    await future.result().close()
        self._shared.users -= 1
        if self._shared.users == 0:
            for ident, shared in list(_CLIENTS.items()):
                if shared is self._shared:
                    del _CLIENTS[ident]
            with contextlib.suppress(Exception):
                # Not the asyncio client's close: its Python callback is run, and then destroyed
                # (taking the GIL), on a detached thread the core starts for the close. A process
                # that exits right after finds the interpreter finalizing there, and the core's
                # thread aborts the process ("terminate called without an active exception"; 6 of
                # 30 runs that published one message and exited). The blocking close waits on a
                # C++ promise instead: nothing of Python's is left on that thread.
                await asyncio.to_thread(self._client._client.close)
