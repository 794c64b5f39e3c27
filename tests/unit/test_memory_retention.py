"""What the memory bus keeps for groups that join later: a bounded backlog, and nothing on reply topics."""

from __future__ import annotations

import uuid

import pytest

from ragbus.config.bus import BusSettings
from ragbus.bus import connect
from ragbus.bus.memory import _BROKERS, drop_memory_broker


@pytest.fixture
def name():
    name = f"retention-{uuid.uuid4().hex[:8]}"
    yield name
    drop_memory_broker(name)


async def _receive_all(bus, topic: str, group: str, expected: int) -> list[bytes]:
    async with await bus.subscribe(topic, group) as sub:
        bodies = []
        for _ in range(expected):
            delivery = await sub.receive()
            await delivery.ack()
            bodies.append(delivery.body)
        return bodies


async def test_a_late_group_gets_the_latest_messages_within_the_count(name):
    async with await connect(f"memory://{name}", BusSettings(memory_retention=3)) as bus:
        for i in range(5):
            await bus.publish("work", f"m{i}".encode())
        assert await _receive_all(bus, "work", "late", 3) == [b"m2", b"m3", b"m4"]
        assert len(_BROKERS[name].topics["work"].retained) == 3


async def test_a_late_group_gets_the_latest_messages_within_the_bytes(name):
    async with await connect(f"memory://{name}", BusSettings(memory_retention_bytes=250)) as bus:
        for i in range(5):
            await bus.publish("work", bytes([i]) * 100)  # 100 bytes each, no headers
        assert await _receive_all(bus, "work", "late", 2) == [bytes([3]) * 100, bytes([4]) * 100]
        topic = _BROKERS[name].topics["work"]
        assert len(topic.retained) == 2 and topic.retained_bytes == 200


async def test_a_reply_topic_delivers_to_its_reader_and_retains_nothing(name):
    reply_to = f"ragbus.reply.test.{uuid.uuid4().hex[:8]}"
    async with await connect(f"memory://{name}") as bus:
        async with await bus.subscribe(reply_to, "caller") as sub:
            for i in range(3):
                await bus.publish(reply_to, f"r{i}".encode())
            got = []
            for _ in range(3):
                delivery = await sub.receive()
                await delivery.ack()
                got.append(delivery.body)
        assert got == [b"r0", b"r1", b"r2"]
        topic = _BROKERS[name].topics[reply_to]
        assert not topic.retained and topic.retained_bytes == 0


def test_the_defaults_bound_what_a_long_lived_process_keeps():
    settings = BusSettings()
    assert settings.memory_retention <= 1_000
    assert settings.memory_retention_bytes <= 8_000_000
