"""Kafka topics by class: how ragbus creates them and what the broker says they are.

A topic's class is told by how ragbus names it: ``<topic>.retry.<group>`` is a
group's retry topic, ``<topic><dead_letter_suffix>`` a dead-letter topic, a
``REPLY_PREFIX`` name one client's replies, a ``CHANGELOG_PREFIX`` name a log of
the stores' changes; anything else carries requests. Each class has its own
``TopicLayout`` ([bus.kafka] request_topics, retry_topics, dead_letter_topics,
reply_topics, changelog_topics). ``KafkaBus.ensure_topics``
creates a missing topic with its class's layout before anyone uses it;
``ragbus topics`` provisions and shows them ahead of time.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.protocol.offset import OffsetRequest

from ragbus.config.bus import TopicLayout
from ragbus.schema.topics import REPLY_PREFIX, is_changelog

from ..base import TopicInfo
from .groups import RETRY_INFIX

RETENTION = "retention.ms"
CLEANUP_POLICY = "cleanup.policy"
MAX_MESSAGE = "max.message.bytes"
# Room beyond a body of [bus] max_message_bytes for its headers and the record batch around it: the
# producer's largest request, a consumer's fetch per partition and a topic's largest batch add it.
FRAMING_BYTES = 65_536
LEADER_WAIT_S = 10.0  # how long create_missing waits for a new topic's partitions to have leaders


def topic_kind(name: str, dead_letter_suffix: str) -> str:
    """``request``, ``retry``, ``dead-letter``, ``reply`` or ``changelog``, by the name."""
    if name.startswith(REPLY_PREFIX):
        return "reply"
    if is_changelog(name):
        return "changelog"
    if name.endswith(dead_letter_suffix):
        return "dead-letter"
    if RETRY_INFIX in name:
        return "retry"
    return "request"


def new_topic(name: str, layout: TopicLayout, brokers: int, max_message_bytes: int) -> NewTopic:
    """The topic as ragbus creates it; its batches may be as large as the bus lets a body be (a broker's
    own default, message.max.bytes, is about 1 MB: a bus limit above it would be refused at publish)."""
    replication = layout.replication_factor or min(3, max(brokers, 1))
    configs = {MAX_MESSAGE: str(max_message_bytes + FRAMING_BYTES)}
    if layout.retention_ms is not None:
        configs[RETENTION] = str(layout.retention_ms)
    if layout.cleanup_policy is not None:
        configs[CLEANUP_POLICY] = layout.cleanup_policy
    return NewTopic(name, layout.partitions, replication, topic_configs=configs)


async def create_missing(
    admin: AIOKafkaAdminClient, layouts: dict[str, TopicLayout], max_message_bytes: int
) -> list[str]:
    """Create the topics of ``layouts`` the broker lacks, each with its layout; the names created.

    A topic that exists is left as it is, even if its layout differs: changing partitions
    or replication under running consumers is an operator's decision, not ours.
    """
    existing = set(await admin.list_topics())
    new = [name for name in layouts if name not in existing]
    if new:
        brokers = len((await admin.describe_cluster())["brokers"])
        with contextlib.suppress(TopicAlreadyExistsError):  # another process made it first
            await admin.create_topics([new_topic(name, layouts[name], brokers, max_message_bytes) for name in new])
        await wait_for_leaders(admin, {name: layouts[name].partitions for name in new})
    return new


async def partitions_of(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, list[int]]:
    """Each existing topic of ``names`` and its partition numbers, as the broker's metadata lists them.

    Asked of the admin client, not of a consumer: a consumer's ``topics()`` fetches every topic's
    metadata but keeps it apart from what ``partitions_for_topic`` reads, which lists only the topics
    the consumer already asked about; a topic created since is not there, and a reader that took that
    for "no partitions" read nothing. Name only topics that exist: naming a missing one can make the
    broker auto-create it with its own layout.
    """
    described = await admin.describe_topics(names)
    return {t["topic"]: sorted(p["partition"] for p in t["partitions"]) for t in described if not t["error_code"]}


async def wait_for_leaders(admin: AIOKafkaAdminClient, partitions: dict[str, int],
                           timeout_s: float = LEADER_WAIT_S) -> None:
    """Return once every partition of the new topics has a leader that serves it.

    Kafka answers CreateTopics once the controller has the topic, a moment before the brokers'
    metadata lists its partitions and their leaders: a publish in that moment is refused with
    NotLeaderForPartition (and retried), and a reader that assigns itself "every partition"
    would see only those listed yet. A moment later still, the metadata names a leader that has
    not yet taken the partition up, and a consumer's first offset lookup there fails (aiokafka
    logs it as an error, then retries): so each leader is asked for its partitions' end offsets
    too. Past ``timeout_s`` it returns anyway: the clients retry.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        described = await admin.describe_topics(list(partitions))
        leaders: dict[int, dict[str, list[int]]] = {}
        for t in described:
            if not t["error_code"]:
                for p in t["partitions"]:
                    if p["leader"] >= 0:
                        leaders.setdefault(p["leader"], {}).setdefault(t["topic"], []).append(p["partition"])
        led = {name: sum(len(by_topic.get(name, ())) for by_topic in leaders.values()) for name in partitions}
        if all(led[name] >= count for name, count in partitions.items()) and await _leaders_serve(admin, leaders):
            return
        if asyncio.get_running_loop().time() >= deadline:
            return
        await asyncio.sleep(0.05)


async def _leaders_serve(admin: AIOKafkaAdminClient, leaders: dict[int, dict[str, list[int]]]) -> bool:
    """Whether each leader answers a ListOffsets (latest) for its partitions without an error.

    aiokafka's admin client has no call for it; this sends the consumer's own request through the
    admin client's connection to the node.
    """
    for node, by_topic in leaders.items():
        request = OffsetRequest(-1, 0, [(topic, [(p, -1) for p in parts]) for topic, parts in by_topic.items()])
        try:
            response = await admin._send_request_to_node(node, request)
        except KafkaError:
            return False
        if any(error_code for _, part_data in response.topics for _, error_code, *_ in part_data):
            return False
    return True


async def end_offsets(admin: AIOKafkaAdminClient, topic: str) -> dict[int, int]:
    """Each partition's end offset, asked of its leader over the admin client's connections.

    Not a consumer's ``end_offsets``: a broker answers a connection's requests in order, so on a
    consumer's connection the question waits behind its long-polling fetch (up to
    ``fetch_max_wait_ms``, a second by default) whenever that consumer has read to the end.
    """
    leaders: dict[int, list[int]] = {}
    for t in await admin.describe_topics([topic]):
        if t["error_code"]:
            raise KafkaError(f"describing {topic!r} failed with error code {t['error_code']}")
        for part in t["partitions"]:
            leaders.setdefault(part["leader"], []).append(part["partition"])
    ends: dict[int, int] = {}
    for node, partitions in leaders.items():
        request = OffsetRequest(-1, 0, [(topic, [(partition, -1) for partition in partitions])])
        response = await admin._send_request_to_node(node, request)
        for _, part_data in response.topics:
            for partition, error_code, *_, offset in part_data:
                if error_code:
                    raise KafkaError(f"the end of {topic}:{partition} is unknown (error code {error_code})")
                ends[partition] = offset
    return ends


async def describe(admin: AIOKafkaAdminClient, names: list[str] | None, dead_letter_suffix: str) -> list[TopicInfo]:
    """What the broker holds for ``names`` (every topic but the broker's internal ones when None).

    A name the broker does not have is left out. Retention is the ``retention.ms`` the
    broker reports for the topic (its own, or the broker's default it inherits); None when
    the broker reports none.
    """
    # Every topic, filtered here: a metadata request naming a missing topic can make the broker
    # auto-create it, with the broker's layout rather than ours.
    wanted = None if names is None else set(names)
    found = sorted(
        (
            t for t in await admin.describe_topics(None)
            if not t["error_code"] and not t["is_internal"] and not t["topic"].startswith("__")
            and (wanted is None or t["topic"] in wanted)
        ),
        key=lambda t: t["topic"],
    )
    if not found:
        return []
    retention: dict[str, int | None] = {}
    # Every config of each topic: Tansu drops the connection when asked for named configs only.
    resources = [ConfigResource(ConfigResourceType.TOPIC, t["topic"]) for t in found]
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            values = [e["config_value"] for e in resource["config_entries"] if e["config_names"] == RETENTION]
            retention[resource["resource_name"]] = int(values[0]) if values and values[0] else None
    return [
        TopicInfo(
            name=t["topic"],
            kind=topic_kind(t["topic"], dead_letter_suffix),
            partitions=len(t["partitions"]),
            replication_factor=max((len(p["replicas"]) for p in t["partitions"]), default=0),
            retention_ms=retention.get(t["topic"]),
        )
        for t in found
    ]

