"""The in-process bus: the embedded default, and a faithful stand-in for tests.

It keeps the semantics of the real brokers rather than taking shortcuts: a
group member gets a message only once until it acks or nacks it, a nacked
message comes back with ``attempt + 1``, a member that leaves hands its
unacked messages to the rest of the group, and a group that joins late starts
from the oldest retained message. Buses opened on the same ``memory://NAME``
in one process share topics, the way clients of one broker do.

Retention, as a broker's: a topic keeps its latest ``retention`` messages and at
most ``retention_bytes`` of them (the oldest go first), for groups that join
later. A reply topic (``ragbus.reply.*``) keeps none: it has one reader, which
subscribed before sending the request its replies answer, so a retained reply
would only hold memory for the life of the process.
"""

from __future__ import annotations

import asyncio
import sys
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ragbus.schema.topics import REPLY_PREFIX, is_changelog

from .assignment import Assign, Membership, OnAssigned, check_assignment
from .base import Bus, BusError, Delivery, GroupStatus, LogReader, LogRecord, Message, Retained, Subscription


@dataclass(frozen=True, slots=True)
class _Published(Message):
    """A retained message with the time ``publish()`` was called, as a broker would stamp it."""

    published_at: float = 0.0
    seq: int = 0  # its number on its topic, from 0: a position that outlives retention dropping older ones
    partition: int = 0  # of a log topic: by its order key


@dataclass(slots=True)
class _Entry:
    message: _Published
    attempt: int = 1


class _Group:
    """One consumer group: who its members are and which member gets what.

    Messages are pushed to members the way brokers assign partitions: a keyed
    message goes to the member its key hashes to (so one key stays in order
    on one member), a keyless one round-robin. With no member, messages wait
    in the backlog for the first to join.
    """

    def __init__(self, backlog: list[_Published]) -> None:
        self.backlog: deque[_Entry] = deque(_Entry(m) for m in backlog)
        self.members: list[MemorySubscription] = []
        self._turn = 0

    def dispatch(self, entry: _Entry) -> None:
        if not self.members:
            self.backlog.append(entry)
            return
        key = entry.message.key
        if key is None:
            self._turn += 1
            member = self.members[self._turn % len(self.members)]
        else:
            member = self.members[zlib.crc32(key.encode()) % len(self.members)]
        member._buffer.append(entry)
        member._wake.set()

    def join(self, member: MemorySubscription) -> None:
        self.members.append(member)
        waiting, self.backlog = self.backlog, deque()
        for entry in waiting:
            self.dispatch(entry)

    def leave(self, member: MemorySubscription, owed: list[_Entry]) -> None:
        self.members.remove(member)
        for entry in owed:
            self.dispatch(entry)


class MemoryMembership(Membership):
    def __init__(self, group: _Assigning, metadata: Callable[[], bytes], on_assigned: OnAssigned) -> None:
        super().__init__(group.topic, group.name)
        self.metadata, self.on_assigned = metadata, on_assigned
        self._group = group

    async def close(self) -> None:
        await self._group.leave(self)


class _Assigning:
    """A group of ``join_assignment`` members on one topic: on each join and leave the first member to
    have joined (the leader) runs the policy, and every member is told its part, one after another."""

    def __init__(self, topic: str, name: str, partitions: int, assign: Assign) -> None:
        self.topic, self.name, self.partitions, self.assign = topic, name, partitions, assign
        self.members: dict[str, MemoryMembership] = {}
        self._lock = asyncio.Lock()
        self._ids = 0

    async def join(self, member: MemoryMembership) -> None:
        async with self._lock:
            self._ids += 1
            self.members[f"{self.name}-{self._ids}"] = member
            await self._rebalance()

    async def leave(self, member: MemoryMembership) -> None:
        async with self._lock:
            gone = [k for k, m in self.members.items() if m is member]
            if not gone:
                return
            for key in gone:
                del self.members[key]
            await self._rebalance()

    async def _rebalance(self) -> None:
        given = {key: m.metadata() for key, m in self.members.items()}
        assigned = self.assign(self.partitions, given)
        check_assignment(self.partitions, given, assigned)
        for key, member in self.members.items():
            owned, data = assigned[key]
            member.owned, member.data = frozenset(owned), data
            await member.on_assigned(member.owned, data)


def _size(message: _Published) -> int:
    return len(message.body or b"") + sum(len(k) + len(v) for k, v in message.headers.items())


class _Topic:
    def __init__(self, retention: int, retention_bytes: int) -> None:
        self.retained: deque[_Published] = deque()
        self.retained_bytes = 0
        self.retention = retention
        self.retention_bytes = retention_bytes
        self.groups: dict[str, _Group] = {}
        self.published = 0
        self.log_readers: set[MemoryLogReader] = set()  # woken by each record appended

    def retain(self, message: _Published) -> None:
        self.retained.append(message)
        self.retained_bytes += _size(message)
        while self.retained and (len(self.retained) > self.retention or self.retained_bytes > self.retention_bytes):
            self.retained_bytes -= _size(self.retained.popleft())


class MemoryBroker:
    """The shared state behind every bus opened on one ``memory://NAME``."""

    def __init__(self, retention: int, retention_bytes: int, log_partitions: int = 4) -> None:
        self.retention = retention
        self.retention_bytes = retention_bytes
        self.log_partitions = log_partitions
        self.topics: dict[str, _Topic] = {}
        self.assignments: dict[tuple[str, str], _Assigning] = {}

    def topic(self, name: str) -> _Topic:
        topic = self.topics.get(name)
        if topic is None:
            if is_changelog(name):  # a log is the state it records: all of it is kept, as long as the process
                topic = self.topics[name] = _Topic(sys.maxsize, sys.maxsize)
            else:
                keeps = 0 if name.startswith(REPLY_PREFIX) else self.retention
                topic = self.topics[name] = _Topic(keeps, self.retention_bytes)
        return topic


_BROKERS: dict[str, MemoryBroker] = {}


def memory_broker(name: str, retention: int, retention_bytes: int, log_partitions: int = 4) -> MemoryBroker:
    """The broker of ``memory://NAME``; its retention and log partitions are those of the first bus opened on it."""
    broker = _BROKERS.get(name)
    if broker is None:
        broker = _BROKERS[name] = MemoryBroker(retention, retention_bytes, log_partitions)
    return broker


def drop_memory_broker(name: str) -> None:
    """Forget every topic of ``memory://NAME`` (tests use this for isolation)."""
    _BROKERS.pop(name, None)


class MemoryDelivery(Delivery):
    __slots__ = ("_entry", "_sub")

    def __init__(self, sub: MemorySubscription, entry: _Entry) -> None:
        m = entry.message
        super().__init__(m.topic, m.body, m.headers, m.key, entry.attempt, m.published_at)
        self._sub = sub
        self._entry = entry

    async def _ack(self) -> None:
        self._sub._inflight.pop(id(self._entry), None)

    async def _nack(self) -> None:
        # Only the member that still owns the entry may requeue it; after the
        # member closed, the entry was already handed back to the group.
        if self._sub._inflight.pop(id(self._entry), None) is not None:
            self._entry.attempt += 1
            self._sub._group.dispatch(self._entry)


class MemorySubscription(Subscription):
    backend = "memory"

    def __init__(self, bus: MemoryBus, topic: str, group: str, state: _Group) -> None:
        super().__init__(bus, topic, group)
        self._group = state
        self._buffer: deque[_Entry] = deque()
        self._wake = asyncio.Event()
        self._inflight: dict[int, _Entry] = {}
        state.join(self)

    async def _receive(self) -> _Entry | None:
        # close() empties the buffer, so a closed member wakes to nothing.
        while not self._buffer and not self._closed:
            self._wake.clear()
            await self._wake.wait()
        return self._buffer.popleft() if self._buffer else None

    def _deliver(self, entry: _Entry) -> Delivery:
        self._inflight[id(entry)] = entry
        return MemoryDelivery(self, entry)

    async def _close(self) -> None:
        # Unacked messages first, in the order they were received, then the
        # ones never handed out: the rest of the group gets them all.
        owed = list(self._inflight.values()) + list(self._buffer)
        self._inflight.clear()
        self._buffer.clear()
        self._group.leave(self, owed)
        self._wake.set()


class MemoryBus(Bus):
    _no_topic_admin = "memory:// topics live inside one process and need no provisioning; use a kafka:// bus"

    def __init__(self, url: str, name: str, *, max_message_bytes: int, retention: int, retention_bytes: int,
                 log_partitions: int = 4) -> None:
        super().__init__(url, max_message_bytes)
        self._broker = memory_broker(name, retention, retention_bytes, log_partitions)

    async def _publish(self, topic: str, body: bytes, headers: dict[str, str], key: str | None) -> None:
        state = self._broker.topic(topic)
        message = _Published(topic, bytes(body), headers, key, published_at=time.time(), seq=state.published)
        state.published += 1
        state.retain(message)
        for group in state.groups.values():
            group.dispatch(_Entry(message))

    async def _subscribe(self, topic: str, group: str) -> Subscription:
        state = self._broker.topic(topic)
        group_state = state.groups.get(group)
        if group_state is None:
            group_state = state.groups[group] = _Group(list(state.retained))
        return MemorySubscription(self, topic, group, group_state)

    async def has_consumers(self, topic: str) -> bool:
        """Exact here: a group with a member on the topic (a ``listen``-er counts, it has a group too)."""
        self._check_open()
        state = self._broker.topics.get(topic)
        return state is not None and any(group.members for group in state.groups.values())

    async def _read_retained(self, topic: str) -> list[Retained]:
        state = self._broker.topics.get(topic)
        return [
            Retained(m.topic, m.body, dict(m.headers), m.key, m.published_at, str(m.seq))
            for m in (state.retained if state is not None else ())
        ]

    async def _append(self, topic: str, body: bytes | None, key: str, order_key: str,
                      headers: dict[str, str]) -> str:
        # One sequence per topic: every record is in order, whatever its order key; its partition (by its
        # order key) lets a reader of some partitions skip the others'.
        state = self._broker.topic(topic)
        seq = state.published
        message = _Published(topic, body, headers, key, published_at=time.time(), seq=seq,  # type: ignore[arg-type]
                             partition=self._partition(order_key))
        state.published += 1
        state.retain(message)
        for reader in state.log_readers:
            reader._wake.set()
        return str(seq)

    async def _read_log(self, topic: str, after: str | None, partitions: frozenset[int] | None) -> LogReader:
        return MemoryLogReader(self._broker.topic(topic), topic, -1 if after is None else _seq(after), partitions)

    async def log_partitions(self, topic: str) -> int:
        self._check_open()
        self._check_log(topic)
        return self._broker.log_partitions

    async def partition_of(self, topic: str, order_key: str) -> int:
        self._check_open()
        self._check_log(topic)
        return self._partition(order_key)

    def _partition(self, order_key: str) -> int:
        return zlib.crc32(order_key.encode()) % self._broker.log_partitions  # stable across processes

    async def _join_assignment(self, topic: str, group: str, partitions: int, metadata: Callable[[], bytes],
                               assign: Assign, on_assigned: OnAssigned, timeout: float) -> Membership:
        state = self._broker.assignments.get((topic, group))
        if state is None:
            state = self._broker.assignments[(topic, group)] = _Assigning(topic, group, partitions, assign)
        elif state.partitions != partitions:
            raise BusError(f"memory:// group {group!r} on {topic!r} is for {state.partitions} partitions, "
                           f"not {partitions}")
        state.assign = assign  # the latest member's policy leads, as a new leader's would on a broker
        member = MemoryMembership(state, metadata, on_assigned)
        await state.join(member)
        return member

    async def list_topics(self) -> list[str]:
        self._check_open()
        return sorted(self._broker.topics)

    async def group_status(self, topic: str, group: str) -> GroupStatus:
        """Exact: the group's members, and every message it has not finished (waiting, buffered or in a handler).

        A group that never joined would start from the topic's retained messages: they all wait for it.
        """
        self._check_open()
        state = self._broker.topics.get(topic)
        if state is None:
            return GroupStatus(topic, group, members=0, waiting=0)
        known = state.groups.get(group)
        if known is None:
            times = [m.published_at for m in state.retained]
            members = 0
        else:
            entries = [*known.backlog]
            for member in known.members:
                entries += [*member._buffer, *member._inflight.values()]
            times = [e.message.published_at for e in entries]
            members = len(known.members)
        oldest = time.time() - min(times) if times else None
        return GroupStatus(topic, group, members=members, waiting=len(times), oldest_s=oldest)

    async def _close(self) -> None:
        pass  # the topics belong to the broker, which outlives this bus


def _seq(position: str) -> int:
    """A record's number (a checkpoint of a reader that has returned none is -1)."""
    try:
        seq = int(position)
    except ValueError:
        seq = -2
    if seq < -1:
        raise BusError(f"{position[:100]!r} is not a position of a memory:// log (a record's number)")
    return seq


class MemoryLogReader(LogReader):
    """A log topic of this process read from a record's number on; every record is kept (no compaction).

    With ``partitions``, the records of other partitions are passed over as if read: the checkpoint is
    the number of the last record looked at, returned or passed over.
    """

    def __init__(self, state: _Topic, topic: str, last: int, partitions: frozenset[int] | None = None) -> None:
        self.topic = topic
        self._state = state
        self._last = last  # the number of the last record returned or passed over; -1: none
        self._partitions = partitions
        self._wake = asyncio.Event()
        state.log_readers.add(self)

    def _pass_over(self) -> None:
        """Move past the records already appended that are not of this reader's partitions."""
        if self._partitions is None:
            return
        retained = self._state.retained
        while self._last + 1 < self._state.published and retained[self._last + 1].partition not in self._partitions:
            self._last += 1

    async def next(self) -> LogRecord:
        state = self._state
        while True:
            self._pass_over()
            if state.published > self._last + 1:
                break
            self._wake.clear()
            await self._wake.wait()
        m = state.retained[self._last + 1]
        self._last += 1
        return LogRecord(self.topic, m.key or "", m.body, dict(m.headers), m.published_at, str(m.seq), m.partition)

    async def caught_up(self) -> bool:
        self._pass_over()
        return self._last + 1 >= self._state.published

    async def behind(self) -> int | None:
        self._pass_over()
        if self._partitions is None:
            return max(0, self._state.published - (self._last + 1))
        return sum(1 for seq in range(self._last + 1, self._state.published)
                   if self._state.retained[seq].partition in self._partitions)

    def covers(self, position: str) -> bool:
        return _seq(position) <= self._last

    def checkpoint(self) -> str:
        return str(self._last)

    async def close(self) -> None:
        self._state.log_readers.discard(self)
