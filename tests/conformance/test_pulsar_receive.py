"""How the Pulsar backend waits for a message: one call into the client's core per receive.

Asking the core first with ``receive(0)`` (a timed wait that raises ``Timeout`` through pybind)
held the event loop ~0.1 ms whenever nothing was prefetched, which is every receive at
concurrency 1, twice per hop (the processor's next request, the caller's next reply). A message
the consumer holds already is still handed over at once, without a wake-up of the loop.
"""

from __future__ import annotations

import asyncio
import threading

import _pulsar
import pytest

from processors.bus import connect
from processors.bus import pulsar as pulsar_backend
from tests.conftest import settings_for_tests


class _Core:
    """The real consumer core, minus its timed ``receive``: a test fails if the backend calls it."""

    def __init__(self, core) -> None:
        self._core = core
        self.timed_receives = 0

    def receive(self, *args):
        self.timed_receives += 1
        return self._core.receive(*args)

    def __getattr__(self, name):
        return getattr(self._core, name)


async def test_receive_never_asks_the_core_with_a_timed_wait(pulsar_broker, topic):
    async with await connect(pulsar_broker.url, settings_for_tests()) as bus:
        sub = await bus.subscribe(topic, "g")
        sub._core = core = _Core(sub._core)
        waiting = asyncio.ensure_future(sub.receive())  # nothing there yet: it waits for the broker
        await bus.publish(topic, b"first")
        assert (await asyncio.wait_for(waiting, 30)).body == b"first"
        for body in (b"second", b"third"):
            await bus.publish(topic, body)
        assert [(await sub.receive()).body for _ in range(2)] == [b"second", b"third"]
        assert core.timed_receives == 0


async def test_prefetched_messages_are_taken_without_waking_the_loop(pulsar_broker, topic):
    async with await connect(pulsar_broker.url, settings_for_tests()) as bus:
        sub = await bus.subscribe(topic, "g")
        bodies = [str(i).encode() for i in range(10)]
        for body in bodies:
            await bus.publish(topic, body)  # each confirmed by the broker before the first receive
        got = [(await asyncio.wait_for(sub.receive(), 30)).body]
        loop = asyncio.get_running_loop()
        wakeups = 0
        original = loop.call_soon_threadsafe

        def counting(*args, **kwargs):
            nonlocal wakeups
            wakeups += 1
            return original(*args, **kwargs)

        loop.call_soon_threadsafe = counting
        try:
            for _ in bodies[1:]:
                got.append((await asyncio.wait_for(sub.receive(), 30)).body)
        finally:
            del loop.call_soon_threadsafe
        assert got == bodies
        # The consumer prefetches what the broker holds: those the core hands over at once, on the
        # loop's own thread, settle there (no wake-up); only one still on its way costs one.
        assert wakeups < len(bodies) - 1


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
        with pytest.raises(Exception):
            failed.result()
    finally:
        loop.close()
