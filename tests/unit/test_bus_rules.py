"""The rules base.py keeps for every backend, on a stub backend whose broker can be made to fail.

The conformance tests show the same rules on memory, Kafka and Pulsar; what a
real broker cannot be made to do on cue (fail a receive, or hand over a
message while the subscription is closing) is shown here.
"""

from __future__ import annotations

import asyncio

import pytest

from ragbus.bus import Bus, BusError, Delivery, MessageTooLarge, SubscriptionClosed
from ragbus.bus.base import Subscription


class _Delivery(Delivery):
    __slots__ = ()

    async def _ack(self) -> None:
        pass

    async def _nack(self) -> None:
        pass


class _Sub(Subscription):
    backend = "stub"

    def __init__(self, bus: _Bus, topic: str, group: str) -> None:
        super().__init__(bus, topic, group)
        self.incoming: asyncio.Queue[bytes | Exception] = asyncio.Queue()
        self.closes = 0

    async def _receive(self) -> bytes:
        item = await self.incoming.get()
        if isinstance(item, Exception):
            raise item
        return item

    def _deliver(self, raw: bytes) -> Delivery:
        return _Delivery(self.topic, raw, {}, None, 1)

    async def _close(self) -> None:
        self.closes += 1


class _Bus(Bus):
    def __init__(self) -> None:
        super().__init__("stub://", max_message_bytes=10)
        self.sent: list[bytes] = []
        self.closes = 0

    async def _publish(self, topic, body, headers, key) -> None:
        self.sent.append(body)

    async def _subscribe(self, topic: str, group: str) -> _Sub:
        return _Sub(self, topic, group)

    async def _close(self) -> None:
        self.closes += 1


async def test_a_failed_wait_is_a_bus_error_naming_backend_and_topic():
    sub = await _Bus().subscribe("t", "g")
    sub.incoming.put_nowait(OSError("connection reset"))
    with pytest.raises(BusError, match=r"stub receive from 't' failed: OSError\('connection reset'\)") as raised:
        await sub.receive()
    assert not isinstance(raised.value, SubscriptionClosed)
    assert isinstance(raised.value.__cause__, OSError)


async def test_a_wait_that_fails_because_of_close_is_the_end_not_an_error():
    sub = await _Bus().subscribe("t", "g")
    waiting = asyncio.ensure_future(sub.receive())
    await asyncio.sleep(0)
    await sub.close()
    sub.incoming.put_nowait(RuntimeError("consumer stopped"))
    with pytest.raises(SubscriptionClosed, match="subscription to 't' is closed"):
        await waiting


async def test_a_message_that_arrives_while_closing_is_not_handed_out():
    sub = await _Bus().subscribe("t", "g")
    waiting = asyncio.ensure_future(sub.receive())
    await asyncio.sleep(0)
    sub.incoming.put_nowait(b"late")
    await sub.close()
    with pytest.raises(SubscriptionClosed):
        await waiting


async def test_closing_twice_releases_the_backend_once():
    bus = _Bus()
    sub = await bus.subscribe("t", "g")
    await sub.close()
    await sub.close()
    await bus.close()
    await bus.close()
    assert (sub.closes, bus.closes) == (1, 1)


async def test_closing_the_bus_closes_what_is_still_open_first():
    bus = _Bus()
    kept, closed_early = await bus.subscribe("t", "a"), await bus.subscribe("t", "b")
    listener = await bus.listen("reply")
    await closed_early.close()
    await bus.close()
    assert (kept.closes, closed_early.closes, listener.closes) == (1, 1, 1)
    assert listener.group == "reply.listener"


async def test_an_oversized_or_late_publish_never_reaches_the_backend():
    bus = _Bus()
    with pytest.raises(MessageTooLarge):
        await bus.publish("t", b"x" * 11)
    await bus.publish("t", b"x" * 10)
    await bus.close()
    with pytest.raises(BusError, match="bus is closed"):
        await bus.publish("t", b"y")
    assert bus.sent == [b"x" * 10]


async def test_what_a_backend_lacks_is_unsupported_and_says_which():
    """A backend without log topics or groupless reads refuses them with the capability named, each an
    ``Unsupported`` (a ``BusError``): a caller can tell "this bus cannot" from a failure."""
    from ragbus.bus import LogTopicsUnsupported, TopicAdminUnsupported, Unsupported
    from ragbus.schema.topics import DOCUMENTS_LOG

    bus = _Bus()
    with pytest.raises(LogTopicsUnsupported, match="has no log topics") as no_log:
        await bus.append(DOCUMENTS_LOG, b"x", key="k")
    with pytest.raises(Unsupported, match="without a group") as no_read:
        await bus.read_retained("t")
    with pytest.raises(TopicAdminUnsupported):
        await bus.provision_topics(["t"])
    assert isinstance(no_log.value, BusError) and not isinstance(no_read.value, LogTopicsUnsupported)
    await bus.close()
