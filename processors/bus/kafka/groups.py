"""Who consumes a Kafka topic, asked of the broker's group coordinator: ``KafkaBus.has_consumers``.

A caller that waits for an answer asks this, so a request no worker will ever
read fails in seconds, naming its topic. The answer is True (a group with a
member reads the topic), False (none does), or None (the broker did not say).

How the groups of a topic are found: every group of this bus creates its retry
topic, ``<topic>.retry.<group>``, when it joins (``bus.py``), so the topic
list names them, on any broker. Tansu needs that: it lists only groups that
committed offsets, and describes members without the topics they read. Other
groups the broker lists (consumers that are not ragbus's) are checked by the
topics their members subscribe to or were assigned; a member that does not say
makes the answer None, never False.

Tansu garbles a DescribeGroups answer for several groups, so each group is
described on its own. Two limits, both Tansu's: it numbers a group's first
generation 0 and aiokafka sends LeaveGroup only from generation 1 on, and it
does not expire a silent member; so a lone member that left stays listed and
its topic looks served (the caller then waits out its time-out, whose message
names the topic).
"""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.errors import KafkaError

RETRY_INFIX = ".retry."  # a group's retry topic is <topic>.retry.<group> (kafka.retry_topic)


async def consumers_of(admin: AIOKafkaAdminClient, topic: str) -> bool | None:
    """Whether a consumer group with a member reads ``topic``; None when a group's members do not say."""
    topics = await admin.list_topics()
    prefix = f"{topic}{RETRY_INFIX}"
    ours = {name[len(prefix):] for name in topics if name.startswith(prefix)}  # this topic's groups
    made_here = {part for name in topics for part in name.split(RETRY_INFIX)[1:]}  # every topic's groups
    listed = {group for group, protocol, *_ in await admin.list_consumer_groups() if protocol == "consumer"}
    foreign = listed - made_here
    described = await asyncio.gather(*(admin.describe_consumer_groups([g]) for g in sorted(ours | foreign)))
    unknown = False
    for response in (r for responses in described for r in responses):
        for group in response.to_object()["groups"]:
            if group["error_code"] or not group["members"]:
                continue  # no such group, or one nobody is in (Empty, Dead)
            if group["group"] in ours:
                return True
            for member in group["members"]:
                read = member_topics(member)
                if read is None:
                    unknown = True
                elif topic in read:
                    return True
    return None if unknown else False


def member_topics(member: dict) -> set[str] | None:
    """The topics a group member subscribes to or was assigned; None when the broker did not say."""
    topics: set[str] = set()
    for raw, kind in ((member.get("member_metadata"), ConsumerProtocolMemberMetadata),
                      (member.get("member_assignment"), ConsumerProtocolMemberAssignment)):
        if not raw:
            continue
        try:
            decoded = kind.decode(raw)
        except Exception:  # not the consumer protocol's layout: says nothing
            continue
        if kind is ConsumerProtocolMemberMetadata:
            topics.update(decoded.subscription)
        else:
            topics.update(name for name, _ in decoded.assignment)
    return topics or None


async def coordinator_answers(bootstrap: str, timeout_ms: int = 5000) -> bool:
    """Whether the broker names a group coordinator (asked for a group no one uses).

    A broker just started answers GroupCoordinatorNotAvailable until it has made its offsets topic,
    which the first such question has it do.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms)
    try:
        await admin.start()
        await admin.find_coordinator("ragbus-ready")
        return True
    except KafkaError:
        return False
    finally:
        await admin.close()
