"""The consume loop on every backend: retries, dead letters, bounded concurrency, cancellation."""

from __future__ import annotations

import asyncio

from ragbus.bus import Undecodable, consume, dead_letter_topic
from ragbus.bus.consume import H_ATTEMPTS, H_ERROR, H_GROUP, H_ORIGIN, H_REASON

from ..helpers.receiving import receive, receive_until


def start(bus, sub, handler, **kwargs):
    stop = asyncio.Event()
    task = asyncio.ensure_future(consume(bus, sub, handler, stop=stop, **kwargs))
    return stop, task


async def test_failing_message_is_dead_lettered_after_max_attempts_and_consumer_keeps_serving(open_bus, topic):
    bus = await open_bus()
    dlq = await bus.subscribe(dead_letter_topic(topic), f"inspect-{topic}")
    sub = await bus.subscribe(topic, f"workers-{topic}")
    handled, seen_attempts = asyncio.Queue(), []

    async def handler(d):
        if d.body == b"poison":
            seen_attempts.append(d.attempt)
            raise RuntimeError("boom")
        await handled.put(d.body)

    await bus.publish(topic, b"poison", {"request-id": "r1"}, key="k")
    stop, task = start(bus, sub, handler, max_attempts=3)
    dead = await receive(dlq)
    await dead.ack()
    await bus.publish(topic, b"after")
    assert await asyncio.wait_for(handled.get(), 20) == b"after"
    stop.set()
    stats = await task
    assert dead.body == b"poison" and dead.key == "k"
    assert dead.headers["request-id"] == "r1"
    assert dead.headers[H_ATTEMPTS] == "3"
    assert "boom" in dead.headers[H_REASON]
    assert dead.headers[H_ERROR] == "RuntimeError"
    assert dead.headers[H_ORIGIN] == topic and dead.headers[H_GROUP] == f"workers-{topic}"
    assert seen_attempts == [1, 2, 3]
    assert stats.dead_lettered == 1 and stats.nacked == 2


async def test_undecodable_message_is_dead_lettered_at_once(open_bus, topic):
    bus = await open_bus()
    dlq = await bus.subscribe(dead_letter_topic(topic), f"inspect-{topic}")
    sub = await bus.subscribe(topic, f"workers-{topic}")
    calls = []

    async def handler(d):
        calls.append(d.body)
        if d.body.startswith(b"\xff"):
            raise Undecodable("invalid utf-8 at byte 0")

    await bus.publish(topic, b"\xff\xfegarbage")
    stop, task = start(bus, sub, handler, max_attempts=5)
    dead = await receive(dlq)
    await dead.ack()
    stop.set()
    await task
    assert dead.headers[H_ATTEMPTS] == "1"
    assert "invalid utf-8" in dead.headers[H_REASON]
    assert calls == [b"\xff\xfegarbage"]


async def test_the_dead_letter_suffix_of_the_bus_settings_names_the_dead_letter_topic(open_bus, topic):
    bus = await open_bus(dead_letter_suffix=".dead")
    dlq = await bus.subscribe(dead_letter_topic(topic, ".dead"), f"inspect-{topic}")
    sub = await bus.subscribe(topic, f"workers-{topic}")

    async def handler(d):
        raise Undecodable("never readable")

    await bus.publish(topic, b"garbage")
    stop, task = start(bus, sub, handler, max_attempts=5)
    dead = await receive(dlq)
    await dead.ack()
    stop.set()
    await task
    assert dead.body == b"garbage" and dead.headers[H_ERROR] == "Undecodable"


async def test_oversized_message_is_dead_lettered_without_running_the_handler(open_bus, topic):
    big_publisher = await open_bus(max_message_bytes=100_000)
    bus = await open_bus(max_message_bytes=1000)
    dlq = await bus.subscribe(dead_letter_topic(topic), f"inspect-{topic}")
    sub = await bus.subscribe(topic, f"workers-{topic}")
    calls = []
    handled = asyncio.Event()

    async def handler(d):
        calls.append(d.body)
        handled.set()

    await big_publisher.publish(topic, b"x" * 5000)
    await big_publisher.publish(topic, b"small")
    stop, task = start(bus, sub, handler)
    dead = await receive(dlq)
    await dead.ack()
    await asyncio.wait_for(handled.wait(), 20)
    stop.set()
    await task
    assert calls == [b"small"]
    assert "5000 bytes" in dead.headers[H_REASON]
    assert dead.body == b""  # too big to forward; the headers say what it was


async def test_flaky_handler_succeeds_on_retry(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"workers-{topic}")
    done = asyncio.Queue()

    async def handler(d):
        if d.attempt == 1:
            raise ConnectionError("transient")
        await done.put((d.body, d.attempt))

    await bus.publish(topic, b"flaky")
    stop, task = start(bus, sub, handler)
    assert await asyncio.wait_for(done.get(), 20) == (b"flaky", 2)
    stop.set()
    stats = await task
    assert stats.acked == 1 and stats.nacked == 1 and stats.dead_lettered == 0


async def test_concurrency_limit_is_honoured(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"workers-{topic}")
    running = peak = 0
    finished = asyncio.Queue()
    gate = asyncio.Event()
    limit_reached = asyncio.Event()

    async def handler(d):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 3:
            limit_reached.set()
        await gate.wait()
        running -= 1
        await finished.put(d.body)

    for i in range(12):
        await bus.publish(topic, f"m{i}".encode())
    stop, task = start(bus, sub, handler, concurrency=3)
    await asyncio.wait_for(limit_reached.wait(), 20)
    gate.set()
    got = {await asyncio.wait_for(finished.get(), 20) for _ in range(12)}
    stop.set()
    await task
    assert peak == 3
    assert len(got) == 12


async def test_consumer_cancelled_mid_handler_gives_the_message_back(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"workers-{topic}")
    entered = asyncio.Event()

    async def stuck(d):
        entered.set()
        await asyncio.Event().wait()

    await bus.publish(topic, b"in-flight")
    task = asyncio.ensure_future(consume(bus, sub, stuck))
    await asyncio.wait_for(entered.wait(), 20)
    task.cancel()  # killed, not stopped: no ack
    await asyncio.gather(task, return_exceptions=True)
    await sub.close()
    survivor = await bus.subscribe(topic, f"workers-{topic}")
    d = await receive(survivor)
    assert d.body == b"in-flight"
    await d.ack()


async def test_stop_lets_handlers_in_flight_finish_and_ack(open_bus, topic):
    bus = await open_bus()
    sub = await bus.subscribe(topic, f"workers-{topic}")
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(d):
        entered.set()
        await release.wait()

    await bus.publish(topic, b"finish-me", key="k")
    stop, task = start(bus, sub, slow)
    await asyncio.wait_for(entered.wait(), 20)
    stop.set()
    release.set()
    stats = await task
    assert stats.acked == 1
    await sub.close()
    again = await bus.subscribe(topic, f"workers-{topic}")
    await bus.publish(topic, b"sentinel", key="k")
    assert await receive_until(again, b"sentinel") == []
