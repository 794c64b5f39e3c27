"""Topics on Kafka as a cluster operator sees them: created with their class's layout, reply topics gone after use."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from ragbus.config.bus import KafkaOptions, TopicLayout
from ragbus.bus import connect, dead_letter_topic
from ragbus.bus.kafka.bus import retry_topic

from ..helpers.brokers import settings_for_tests

pytestmark = pytest.mark.brokers


@contextlib.asynccontextmanager
async def admin_of(broker):
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.url.removeprefix("kafka://"))
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def partitions(admin, topics: list[str]) -> dict[str, int]:
    return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(topics)}


async def test_topics_are_created_with_their_classes_partitions(kafka_broker, topic):
    kafka = KafkaOptions(fetch_max_wait_ms=5, commit_interval_ms=50, request_topics=TopicLayout(partitions=3),
                         retry_topics=TopicLayout(partitions=2), dead_letter_topics=TopicLayout(partitions=1))
    settings = settings_for_tests(kafka=kafka)
    async with await connect(kafka_broker.url, settings) as bus:
        sub = await bus.subscribe(topic, "g")
        await bus.publish(dead_letter_topic(topic, bus.dead_letter_suffix), b"x")  # created by its first publish
        published_first = f"{topic}-published"
        await bus.publish(published_first, b"y")  # a request topic nobody subscribed to yet
        await sub.close()
    async with admin_of(kafka_broker) as admin:
        dlq = dead_letter_topic(topic, ".dlq")
        found = await partitions(admin, [topic, retry_topic(topic, "g"), dlq, published_first])
    assert found == {topic: 3, retry_topic(topic, "g"): 2, dlq: 1, published_first: 3}


async def test_a_log_topic_is_created_compacted_with_its_classes_partitions(kafka_broker):
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from ragbus.schema.topics import CHANGELOG_PREFIX

    log_topic = f"{CHANGELOG_PREFIX}{uuid.uuid4().hex[:10]}"
    async with await connect(kafka_broker.url, settings_for_tests()) as bus:
        await bus.append(log_topic, b"x", key="k")  # created by its first append
    async with admin_of(kafka_broker) as admin:
        found = await partitions(admin, [log_topic])
        (described,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, log_topic)])
    configs = {e["config_names"]: e["config_value"]
               for r in described.to_object()["resources"] for e in r["config_entries"]}
    assert found == {log_topic: KafkaOptions().changelog_topics.partitions}
    assert configs["cleanup.policy"] == "compact"
