"""``Bus.join_assignment`` on Kafka: a consumer group whose assignor is the caller's policy.

The member is an ``AIOKafkaConsumer`` subscribed to the group's topic (made with the partition
count asked for, and never written to), so it fetches nothing; the group coordinator elects the
leader, whose assignor runs the caller's ``assign`` over every member's metadata, and each member
learns its partitions and data from the SyncGroup answer. A member that stops leaves the group
at once; one killed is dropped after ``session_timeout_ms`` without heartbeats.

aiokafka's assignors are classes with class-level hooks, so each membership makes a class of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping

import msgspec
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.errors import ConsumerStoppedError, KafkaError

from ..assignment import Assign, Membership, OnAssigned, check_assignment
from ..base import BusError, BusUnavailable
from . import topics as kafka_topics

log = logging.getLogger(__name__)
ASSIGNOR = "ragbus-assign"  # every member of such a group names the same protocol


class KafkaMembership(Membership):
    def __init__(self, bus, topic: str, group: str, partitions: int, *, metadata: Callable[[], bytes],
                 assign: Assign, on_assigned: OnAssigned) -> None:
        super().__init__(topic, group)
        self._bus, self._partitions = bus, partitions
        self._on_assigned = on_assigned
        self._assigned = asyncio.Event()
        self._pending = b""
        opts = bus.settings.kafka
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bus.address.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            session_timeout_ms=opts.session_timeout_ms,
            heartbeat_interval_ms=opts.heartbeat_interval_ms,
            partition_assignment_strategy=(_assignor(self, metadata, assign),),
            **bus.security,
        )
        self._poll: asyncio.Task | None = None

    async def start(self, timeout: float) -> None:
        admin = await self._bus._admin_client()
        layout = msgspec.structs.replace(self._bus.layout(self.topic), partitions=self._partitions)
        await kafka_topics.create_missing(admin, {self.topic: layout}, self._bus.max_message_bytes)
        held = (await kafka_topics.partitions_of(admin, [self.topic])).get(self.topic, [])
        if len(held) != self._partitions:
            raise BusError(f"kafka topic {self.topic!r} has {len(held)} partitions, not the {self._partitions} "
                           f"its group {self.group!r} is for: it was made for another layout; delete it to change it")
        self._consumer.subscribe([self.topic], listener=_Listener(self))
        try:
            await asyncio.wait_for(self._consumer.start(), timeout)
            await asyncio.wait_for(self._assigned.wait(), timeout)
        except TimeoutError:
            await self._consumer.stop()
            raise BusUnavailable(f"kafka group {self.group!r} on {self.topic!r} gave no assignment within {timeout}s") \
                from None
        except BaseException:
            await asyncio.shield(self._consumer.stop())
            raise
        # The group needs a member that polls: one that stopped would be dropped after max_poll_interval_ms.
        self._poll = asyncio.ensure_future(self._keep_polling())

    async def _keep_polling(self) -> None:
        while True:
            try:
                await self._consumer.getone()  # the topic stays empty: this waits, heartbeats go on meanwhile
            except ConsumerStoppedError:
                return  # the membership is closing
            except KafkaError as exc:
                log.warning("kafka group %s on %s: %r; polling again", self.group, self.topic, exc)
                await asyncio.sleep(1.0)  # a pause before asking a failing broker again, not a wait for a condition

    async def _took(self, partitions: frozenset[int]) -> None:
        self.owned, self.data = partitions, self._pending
        try:
            await self._on_assigned(partitions, self.data)
        finally:
            self._assigned.set()

    async def close(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll
        await self._consumer.stop()  # a dynamic member: LeaveGroup now, the others are assigned at once


class _Listener(ConsumerRebalanceListener):
    def __init__(self, membership: KafkaMembership) -> None:
        self._membership = membership

    async def on_partitions_revoked(self, revoked) -> None:
        pass  # eager rebalancing revokes everything each time: the assignment that follows says what changed

    async def on_partitions_assigned(self, assigned) -> None:
        await self._membership._took(frozenset(tp.partition for tp in assigned))


def _assignor(membership: KafkaMembership, metadata: Callable[[], bytes], assign: Assign) -> type:
    topic = membership.topic

    def member_metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(0, sorted(topics), metadata())

    def assign_all(cls, cluster, members: Mapping[str, ConsumerProtocolMemberMetadata]):
        count = len(cluster.partitions_for_topic(topic) or ())
        given = {member: m.user_data or b"" for member, m in members.items()}
        try:
            assigned = assign(count, given)
            check_assignment(count, given, assigned)
        except Exception:
            log.exception("the assignment of group %s failed; every member gets nothing", membership.group)
            assigned = {member: ((), b"") for member in given}
        return {member: ConsumerProtocolMemberAssignment(0, [(topic, sorted(owned))], data)
                for member, (owned, data) in assigned.items()}

    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        membership._pending = assignment.user_data or b""

    return type("RagbusAssignor", (AbstractPartitionAssignor,), {
        "name": ASSIGNOR, "version": 0,
        "metadata": classmethod(member_metadata),
        "assign": classmethod(assign_all),
        "on_assignment": classmethod(on_assignment),
    })
