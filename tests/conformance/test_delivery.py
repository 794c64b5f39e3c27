"""Delivery semantics every backend must show, run against memory, Kafka and Pulsar.

"Nothing more arrives" is proven with a sentinel published afterwards: the
next delivery must be the sentinel, so no test sleeps to wait for silence.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ragbus.bus import BusError, MessageTooLarge, SubscriptionClosed

from ..helpers.receiving import RECEIVE_TIMEOUT, receive, receive_until


async def drain_members(members: dict, total: int) -> dict[str, list[bytes]]:
    """Receive and ack on every member at once until ``total`` messages arrived; bodies by member."""
    got: dict[str, list[bytes]] = {name: [] for name in members}
    done = asyncio.Event()

    async def drain(name):
        while True:
            d = await members[name].receive()
            await d.ack()
            got[name].append(d.body)
            if sum(len(v) for v in got.values()) >= total:
                done.set()

    tasks = [asyncio.ensure_future(drain(name)) for name in members]
    try:
        await asyncio.wait_for(done.wait(), RECEIVE_TIMEOUT)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return got


async def test_publish_then_receive_keeps_body_headers_and_key(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"g-{topic}")
    await bus.publish(topic, b"\x00\xffpayload", {"request-id": "r-1", "reply-to": "x"}, key="k1")
    d = await receive(sub)
    assert d.body == b"\x00\xffpayload"
    assert d.headers["request-id"] == "r-1" and d.headers["reply-to"] == "x"
    assert d.key == "k1"
    assert d.attempt == 1
    assert d.topic == topic
    await d.ack()


async def test_new_group_starts_from_oldest_message(open_bus, topic):
    bus = await open_bus()
    await bus.publish(topic, b"before-anyone-subscribed")
    sub = await bus.subscribe(topic, f"late-{topic}")
    d = await receive(sub)
    assert d.body == b"before-anyone-subscribed"
    await d.ack()


async def test_acked_message_is_not_delivered_again(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"g-{topic}")
    # One key: on Kafka only messages of one partition are ordered, and the
    # sentinel must come after anything redelivered.
    await bus.publish(topic, b"one", key="k")
    d = await receive(sub)
    await d.ack()
    await sub.close()
    sub = await bus.subscribe(topic, f"g-{topic}")
    await bus.publish(topic, b"sentinel", key="k")
    assert await receive_until(sub, b"sentinel") == []


async def test_nacked_message_comes_back_with_attempt_counted(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"g-{topic}")
    await bus.publish(topic, b"retry-me", {"h": "v"}, key="k")
    first = await receive(sub)
    assert first.attempt == 1
    await first.nack()
    again = await receive(sub)
    assert (again.body, again.headers.get("h"), again.key) == (b"retry-me", "v", "k")
    assert again.attempt == 2
    await again.nack()
    third = await receive(sub)
    assert third.attempt == 3
    await third.ack()


async def test_unacked_message_goes_to_next_member_when_consumer_dies(open_bus, topic):
    bus = await open_bus()
    dying = await bus.subscribe(topic, f"g-{topic}")
    await bus.publish(topic, b"in-flight")
    d = await receive(dying)
    assert d.body == b"in-flight"
    await dying.close()  # gone without ack
    survivor = await bus.subscribe(topic, f"g-{topic}")
    again = await receive(survivor)
    assert again.body == b"in-flight"
    await again.ack()


async def test_only_the_unfinished_message_is_owed_after_out_of_order_acks(open_bus, topic):
    """Later messages finish first; the slow first one must still come back.

    On Kafka this is the commit rule: the committed offset may not pass the
    oldest unfinished message in its partition, whatever finished after it.
    """
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"g-{topic}")
    for i in range(10):
        await bus.publish(topic, f"m{i}".encode(), key="one-partition")
    deliveries = [await receive(sub) for _ in range(10)]
    slow = deliveries[0]
    for d in reversed(deliveries[1:]):
        await d.ack()
    await sub.close()  # dies while m0 is still in its handler
    sub = await bus.subscribe(topic, f"g-{topic}")
    await bus.publish(topic, b"sentinel", key="one-partition")
    redelivered = await receive_until(sub, b"sentinel")
    assert slow.body in redelivered
    # Finished messages may be read again (at least once), never lost, never m0 missing.
    assert redelivered.count(b"m0") == 1


async def test_group_members_split_the_topic(open_bus, topic):
    bus_a, bus_b = await open_bus(), await open_bus()
    a = await bus_a.subscribe(topic, f"workers-{topic}")
    b = await bus_b.subscribe(topic, f"workers-{topic}")
    sent = {f"m{i}".encode() for i in range(40)}
    for i, body in enumerate(sorted(sent)):
        await bus_a.publish(topic, body, key=f"k{i}")
    got = await drain_members({"a": a, "b": b}, len(sent))
    assert got["a"] and got["b"], f"one member got everything: {len(got['a'])}/{len(got['b'])}"
    assert sorted(got["a"] + got["b"]) == sorted(sent)  # each message once


async def test_two_groups_each_see_every_message(open_bus, topic):
    bus = await open_bus()
    one = await bus.subscribe(topic, f"one-{topic}")
    two = await bus.subscribe(topic, f"two-{topic}")
    bodies = [f"m{i}".encode() for i in range(5)]
    for body in bodies:
        await bus.publish(topic, body, key="k")
    for sub in (one, two):
        seen = []
        for _ in bodies:
            d = await receive(sub)
            await d.ack()
            seen.append(d.body)
        assert sorted(seen) == bodies


async def test_a_nack_in_one_group_is_not_seen_by_another(open_bus, topic):
    bus = await open_bus()
    failing = await bus.subscribe(topic, f"failing-{topic}")
    other = await bus.subscribe(topic, f"other-{topic}")
    await bus.publish(topic, b"x", key="k")
    d = await receive(failing)
    await d.nack()
    await (await receive(failing)).ack()
    await bus.publish(topic, b"sentinel", key="k")
    assert await receive_until(other, b"sentinel") == [b"x"]


async def test_messages_with_one_key_arrive_in_order(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"g-{topic}")
    keys = ["alpha", "beta", "gamma"]
    for i in range(20):
        for k in keys:
            await bus.publish(topic, f"{k}:{i}".encode(), key=k)
    seen: dict[str, list[int]] = {k: [] for k in keys}
    for _ in range(60):
        d = await receive(sub)
        k, i = d.body.decode().split(":")
        seen[k].append(int(i))
        await d.ack()
    for k in keys:
        assert seen[k] == list(range(20)), k


async def test_publish_refuses_oversized_body_before_it_reaches_the_broker(open_bus, topic):
    bus = await open_bus(max_message_bytes=1000)
    sub = await bus.subscribe(topic, f"g-{topic}")
    with pytest.raises(MessageTooLarge, match="1001 bytes exceeds max_message_bytes=1000"):
        await bus.publish(topic, b"x" * 1001, key="k")
    await bus.publish(topic, b"x" * 1000, key="k")  # the limit itself is allowed
    await bus.publish(topic, b"sentinel", key="k")
    assert await receive_until(sub, b"sentinel") == [b"x" * 1000]


async def test_a_closed_bus_refuses_everything_and_closes_its_subscriptions(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"g-{topic}")
    listener = await bus.listen(f"{topic}.private")
    await bus.close()
    await bus.close()  # twice is harmless
    for call in (
        bus.publish(topic, b"late"),
        bus.publish(topic, b"x" * (bus.max_message_bytes + 1)),  # closed is said before too large
        bus.subscribe(topic, f"g-{topic}"),
        bus.listen(topic),
    ):
        with pytest.raises(BusError, match="bus is closed") as raised:
            await call
        assert type(raised.value) is BusError
    for closed in (sub, listener):
        with pytest.raises(SubscriptionClosed, match="is closed"):
            await closed.receive()


async def test_a_closed_subscription_ends_receive_waiting_or_not(open_bus, topic):
    bus = await open_bus()
    for sub in (await bus.subscribe(topic, f"g-{topic}"), await bus.listen(f"{topic}.private")):
        waiting = asyncio.ensure_future(sub.receive())
        await asyncio.sleep(0.2)  # let it block on the broker
        await sub.close()
        with pytest.raises(SubscriptionClosed, match=f"subscription to '{sub.topic}' is closed"):
            await asyncio.wait_for(waiting, RECEIVE_TIMEOUT)
        with pytest.raises(SubscriptionClosed):
            await sub.receive()
        await sub.close()  # twice is harmless
        assert [d async for d in sub] == []
    # The bus is still open and serves a new member of the same group.
    again = await bus.subscribe(topic, f"g-{topic}")
    await bus.publish(topic, b"after", key="k")
    assert (await receive(again)).body == b"after"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_each_key_stays_in_order_on_one_member_of_a_group(backend, open_bus, topic):
    """Per-key ordering across members. On Pulsar this needs a KeyShared subscription."""
    from ragbus.config.bus import PulsarOptions

    key_shared = PulsarOptions(subscription_type="KeyShared", consumer_id_spread=8)
    options = {"pulsar": key_shared} if backend == "pulsar" else {}
    bus_a, bus_b = await open_bus(**options), await open_bus(**options)
    members = {"a": await bus_a.subscribe(topic, f"g-{topic}"), "b": await bus_b.subscribe(topic, f"g-{topic}")}
    keys = [f"key-{i}" for i in range(8)]
    for i in range(10):
        for k in keys:
            await bus_a.publish(topic, f"{k}:{i}".encode(), key=k)
    bodies = await drain_members(members, len(keys) * 10)
    seen = {name: [(k, int(i)) for k, i in (b.decode().split(":") for b in items)] for name, items in bodies.items()}
    owners = {}
    for name, items in seen.items():
        for k in keys:
            numbers = [i for key, i in items if key == k]
            if numbers:
                assert numbers == sorted(numbers), f"{k} out of order on member {name}: {numbers}"
                owners.setdefault(k, []).append(name)
    assert all(len(v) == 1 for v in owners.values()), f"a key was split between members: {owners}"
    assert sum(len(v) for v in seen.values()) == len(keys) * 10


async def test_listen_reads_a_private_topic_from_its_start(open_bus, topic):
    bus = await open_bus()
    await bus.publish(topic, b"early", {"request-id": "1"})
    listener = await bus.listen(topic)
    await bus.publish(topic, b"late", {"request-id": "2"}, key="k")
    got = []
    for _ in range(2):
        d = await receive(listener)
        await d.ack()
        got.append((d.body, d.headers["request-id"]))
    assert sorted(got) == [(b"early", "1"), (b"late", "2")]
