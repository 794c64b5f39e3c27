"""Where callers' responses arrive (``Bus.reply_inbox``), on every backend; on Kafka, shared topics that do not
pile up."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from ragbus.bus import connect
from ragbus.bus.kafka.bus import SHARED_REPLY_TOPIC
from ragbus.runtime.envelope import REQUEST_ID
from ragbus.runtime.request_client import RequestClient
from ragbus.schema import REPLY_PREFIX

from ..helpers.brokers import settings_for_tests
from ..helpers.serving import serving
from ..helpers.echo import EchoProcessor, EchoRequest, EchoResponse, EchoSettings


@contextlib.asynccontextmanager
async def echo_service(url: str, topic: str):
    """The echo processor serving ``topic``; yields its bus."""
    async with (
        await connect(url, settings_for_tests()) as bus,
        serving(bus, EchoProcessor("echo", EchoSettings(topic=topic, group=f"echo-{topic}"))),
    ):
        yield bus


async def test_a_reply_published_right_after_the_inbox_opens_arrives_and_only_there(bus_url):
    async with await connect(bus_url, settings_for_tests()) as bus:
        address, inbox = await bus.reply_inbox("t")
        other_address, other = await bus.reply_inbox("t")
        assert address.startswith(REPLY_PREFIX) and other_address.startswith(REPLY_PREFIX)
        await bus.publish(address, b"mine", {REQUEST_ID: "r1"})
        got = await asyncio.wait_for(inbox.receive(), 30)
        assert (got.body, got.headers[REQUEST_ID]) == (b"mine", "r1")
        if other_address != address:  # on Kafka two callers may share a partition, then both see it
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(other.receive(), 0.5)


@pytest.mark.brokers
async def test_callers_sharing_a_kafka_reply_partition_each_get_only_their_own_answers(kafka_broker, topic):
    async with echo_service(kafka_broker.url, topic), contextlib.AsyncExitStack() as callers:
        # Each on a bus of its own, as separate processes are: the clients of one bus share one inbox anyway.
        buses = [await callers.enter_async_context(await connect(kafka_broker.url, settings_for_tests()))
                 for _ in range(12)]
        clients = [await RequestClient(bus, name=f"c{i}").start() for i, bus in enumerate(buses)]
        try:
            partitions = {c.reply_topic for c in clients}
            assert len(partitions) < len(clients)  # 12 callers over reply_topics.partitions (8): some share
            answers = await asyncio.gather(*(
                c.request(topic, EchoRequest(text=f"{i}-{n}"), EchoResponse, timeout=60)
                for i, c in enumerate(clients) for n in range(5)
            ))
            assert [a.text for a in answers] == [f"{i}-{n}" for i in range(12) for n in range(5)]
            assert sum(c.stats.answered for c in clients) == 60
            assert all(c.stats.late == c.stats.duplicates == 0 for c in clients)
            assert sum(c.stats.foreign for c in clients) > 0  # the sharers saw, and skipped, each other's
        finally:
            for c in clients:
                await c.close()


@pytest.mark.brokers
async def test_a_hundred_kafka_callers_leave_one_reply_topic(kafka_broker, topic):
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.url.removeprefix("kafka://"))
    await admin.start()
    try:
        before = {t for t in await admin.list_topics() if t.startswith(REPLY_PREFIX)}
        async with echo_service(kafka_broker.url, topic):
            for i in range(100):  # as 100 `ragbus ask` runs would, each with its own client
                async with await connect(kafka_broker.url, settings_for_tests()) as own, \
                        RequestClient(own, name="ask") as client:
                    assert (await client.request(topic, EchoRequest(text=str(i)), EchoResponse, timeout=60)).text \
                        == str(i)
            after = {t for t in await admin.list_topics() if t.startswith(REPLY_PREFIX)}
    finally:
        await admin.close()
    assert after - before <= {SHARED_REPLY_TOPIC} and SHARED_REPLY_TOPIC in after
