"""How the Pulsar backend waits for a message: the client's listener pushes it, receive never pulls.

Pulling (``receive(0)``, then ``receive_async``) held the event loop ~0.1 ms each time the
consumer's queue was empty, which at concurrency 1 is every receive, twice per hop on the
critical path (the processor's next request, the caller's next reply): the core tries its
queue with a timed wait on the calling thread. The listener (``processors/bus/pulsar/inbox.py``) keeps the
semantics: back-pressure at ``receiver_queue_size``, nothing acknowledged that was not handled,
and what a closed consumer held goes to another member.
"""

from __future__ import annotations

import asyncio
import threading

import _pulsar
import pulsar.asyncio as pulsar_async
import pytest

from ragbus.config.bus import PulsarOptions
from ragbus.bus import connect
from ragbus.bus.base import SubscriptionClosed
from ragbus.bus.pulsar import bus as pulsar_backend
from ragbus.bus.pulsar.inbox import Inbox, InboxClosed

from ..helpers.brokers import settings_for_tests


class _Core:
    """The real consumer core, counting the calls that pull a message from it."""

    def __init__(self, core) -> None:
        self._core = core
        self.pulls = 0

    def receive(self, *args):
        self.pulls += 1
        return self._core.receive(*args)

    def receive_async(self, *args):
        self.pulls += 1
        return self._core.receive_async(*args)

    def __getattr__(self, name):
        return getattr(self._core, name)


async def test_receive_never_pulls_from_the_core(pulsar_broker, topic):
    async with await connect(pulsar_broker.url, settings_for_tests()) as bus:
        sub = await bus.subscribe(topic, "g")
        sub._core = core = _Core(sub._core)
        waiting = asyncio.ensure_future(sub.receive())  # nothing there yet: it waits for the broker
        await bus.publish(topic, b"first")
        first = await asyncio.wait_for(waiting, 30)
        await first.ack()
        for body in (b"second", b"third"):
            await bus.publish(topic, body)
        rest = [await asyncio.wait_for(sub.receive(), 30) for _ in range(2)]
        assert [d.body for d in (first, *rest)] == [b"first", b"second", b"third"]
        for d in rest:
            await d.ack()
        assert core.pulls == 0


async def test_what_a_closed_consumer_held_unacknowledged_goes_to_another_member(pulsar_broker, topic):
    async with await connect(pulsar_broker.url, settings_for_tests()) as bus:
        first = await bus.subscribe(topic, "g")
        bodies = [str(i).encode() for i in range(5)]
        for body in bodies:
            await bus.publish(topic, body)
        taken = await asyncio.wait_for(first.receive(), 30)  # the others wait in its inbox or the core
        assert taken.body == b"0"
        second = await bus.subscribe(topic, "g")
        await first.close()  # nothing acknowledged
        got = set()
        while got != set(bodies):
            d = await asyncio.wait_for(second.receive(), 30)
            got.add(d.body)
            await d.ack()


async def test_a_busy_consumer_holds_no_more_than_its_receiver_queue_size(pulsar_broker, topic):
    # README: a small receiver_queue_size bounds what a cut-off worker holds. The listener's inbox
    # and the core's queue share it: one taken message, plus at most 4 held, leave 15 of 20 to others.
    async with await connect(pulsar_broker.url, settings_for_tests()) as bus:
        settings = settings_for_tests(pulsar=PulsarOptions(receiver_queue_size=4, consumer_id_spread=8))
        async with await connect(pulsar_broker.url, settings) as small:
            busy = await small.subscribe(topic, "g")
            for i in range(20):
                await bus.publish(topic, str(i).encode())
            taken = await asyncio.wait_for(busy.receive(), 30)  # its handler never finishes
            for _ in range(1000):  # until its inbox is full and the listener paused
                if busy._inbox.waiting >= max(1, 4 // 2):
                    break
                await asyncio.sleep(0.01)
            other = await bus.subscribe(topic, "g")
            got = set()
            while len(got) < 15:
                d = await asyncio.wait_for(other.receive(), 30)
                got.add(d.body)
                await d.ack()
            assert taken.body not in got


async def test_close_ends_a_waiting_receive(pulsar_broker, topic):
    async with await connect(pulsar_broker.url, settings_for_tests()) as bus:
        sub = await bus.subscribe(topic, "g")
        waiting = asyncio.ensure_future(sub.receive())
        await asyncio.sleep(0)  # let it start waiting
        await sub.close()
        with pytest.raises(SubscriptionClosed):
            await asyncio.wait_for(waiting, 30)


class _FakeConsumer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_message_listener(self) -> None:
        self.calls.append("pause")

    def resume_message_listener(self) -> None:
        self.calls.append("resume")


def _push(inbox: Inbox, consumer: _FakeConsumer, messages) -> None:
    """Deliver as the core does: from a thread of its own."""
    worker = threading.Thread(target=lambda: [inbox.listener(consumer, m) for m in messages])
    worker.start()
    worker.join()


async def test_inbox_pauses_the_listener_at_its_limit_and_resumes_at_half():
    inbox, consumer = Inbox(asyncio.get_running_loop(), limit=4), _FakeConsumer()
    _push(inbox, consumer, ["m0", "m1", "m2", "m3"])
    for _ in range(10):
        if inbox.waiting == 4:
            break
        await asyncio.sleep(0)
    assert inbox.waiting == 4
    assert consumer.calls == ["pause"]  # the core keeps the rest; the broker stops at its queue size
    assert await inbox.get() == "m0"
    assert consumer.calls == ["pause"]  # 3 waiting: still above half
    assert await inbox.get() == "m1"
    assert consumer.calls == ["pause", "resume"]
    assert [await inbox.get(), await inbox.get()] == ["m2", "m3"]


async def test_a_burst_from_the_listener_wakes_the_loop_once():
    loop = asyncio.get_running_loop()
    inbox, consumer = Inbox(loop, limit=100), _FakeConsumer()
    wakeups = 0
    original = loop.call_soon_threadsafe

    def counting(*args, **kwargs):
        nonlocal wakeups
        wakeups += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting
    try:
        _push(inbox, consumer, [f"m{i}" for i in range(10)])  # the loop does not run meanwhile
    finally:
        del loop.call_soon_threadsafe
    assert wakeups == 1
    await asyncio.sleep(0)
    assert inbox.waiting == 10
    assert [await inbox.get() for _ in range(10)] == [f"m{i}" for i in range(10)]
    _push(inbox, consumer, ["again"])  # taken in: the next message wakes the loop again
    assert await asyncio.wait_for(inbox.get(), 30) == "again"


async def test_inbox_hands_a_message_to_a_waiting_get_and_skips_a_cancelled_one():
    inbox, consumer = Inbox(asyncio.get_running_loop(), limit=10), _FakeConsumer()
    cancelled = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    cancelled.cancel()
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    _push(inbox, consumer, ["m"])
    assert await asyncio.wait_for(waiting, 30) == "m"
    assert inbox.waiting == 0


async def test_closing_the_inbox_fails_waiting_and_later_gets():
    inbox = Inbox(asyncio.get_running_loop(), limit=10)
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    inbox.close()
    with pytest.raises(InboxClosed):
        await waiting
    with pytest.raises(InboxClosed):
        await inbox.get()
    _push(inbox, _FakeConsumer(), ["late"])  # after close: dropped, never handed out
    await asyncio.sleep(0)
    assert inbox.waiting == 0


def test_resolve_settles_inline_only_on_the_loops_own_thread():
    loop = asyncio.new_event_loop()
    try:
        here = loop.create_future()
        pulsar_backend._resolve(here, threading.get_ident(), _pulsar.Result.Ok, "value")
        assert here.result() == "value"  # at once: no turn of the loop needed

        there = loop.create_future()
        worker = threading.Thread(
            target=pulsar_backend._resolve, args=(there, threading.get_ident(), _pulsar.Result.Ok, "later")
        )
        worker.start()
        worker.join()
        assert not there.done()  # handed to the loop, which has not run yet
        assert loop.run_until_complete(there) == "later"

        failed = loop.create_future()
        pulsar_backend._resolve(failed, threading.get_ident(), _pulsar.Result.Timeout, None)
        with pytest.raises(pulsar_async.PulsarException) as caught:
            failed.result()
        assert caught.value.error() == _pulsar.Result.Timeout
    finally:
        loop.close()
