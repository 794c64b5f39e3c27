"""Every RequestClient of a process on one bus shares one reply inbox (``runtime/replies.py``), on every backend.

One reply consumer per process, not one per client: a ``worker --all`` holds several clients (document-rag's,
document-load's), and on Kafka each consumer long-polls the broker while idle. Sharing must not blur whose reply
is whose: each call gets its own answer, a late or duplicate reply is counted on the client that made the call,
and one client closing leaves the others' calls alone.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from ragbus.bus import Bus
from ragbus.runtime import replies
from ragbus.runtime.envelope import REPLY_TO, REQUEST_ID
from ragbus.runtime.processor import RequestContext
from ragbus.runtime.request_client import ClientClosed, RequestClient
from ragbus.schema import REPLY_PREFIX, decode, encode

from ..helpers.serving import client_on, serving
from ..helpers.echo import EchoPiece, EchoProcessor, EchoRequest, EchoResponse, EchoSettings, StreamingEcho


def reply_subscriptions(bus: Bus) -> list:
    """The consumers this bus holds open on reply topics."""
    return [s for s in bus._subscriptions if s.topic.startswith(REPLY_PREFIX)]


def no_foreign(clients: list[RequestClient]) -> bool:
    """No client took a sibling's reply for another process's. On Kafka the inbox is a partition that other
    tests' callers in this session may have used too (their late replies are foreign here), so there every
    client of the inbox must only count the same."""
    counts = {c.stats.foreign for c in clients}
    return counts == {0} or (clients[0].bus.url.startswith("kafka") and len(counts) == 1)


class Relay(EchoProcessor):
    """A processor that calls another over the bus with a client of its own, as document-rag and document-load do."""

    def __init__(self, name: str, settings: EchoSettings, target: str) -> None:
        super().__init__(name, settings)
        self.target = target
        self.client: RequestClient | None = None

    async def start(self) -> None:
        self.client = await RequestClient(self.bus, name=self.name, timeout_s=60).start()

    async def close(self) -> None:
        await self.client.close()

    async def handle(self, request: EchoRequest, context: RequestContext) -> EchoResponse:
        answer = await self.client.request(self.target, request, EchoResponse)
        return EchoResponse(text=f"{self.name}:{answer.text}", request_id=context.request_id)


@contextlib.asynccontextmanager
async def manual_service(bus: Bus, topic: str):
    """Requests to ``topic`` as they arrive, for a test to answer by hand (or not at all)."""
    async with await bus.subscribe(topic, f"manual-{topic}") as sub:
        async def next_request():
            d = await asyncio.wait_for(sub.receive(), 60)
            await d.ack()
            return d

        yield next_request


async def answer(bus: Bus, request, text: str) -> None:
    """Publish a reply to ``request`` as a processor would."""
    await bus.publish(request.headers[REPLY_TO], encode(EchoResponse(text=text)),
                      {REQUEST_ID: request.headers[REQUEST_ID]})


async def test_a_process_with_several_clients_holds_one_reply_consumer(open_bus, topic):
    bus = await open_bus()
    names = [f"relay{i}" for i in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(serving(bus, EchoProcessor("echo", EchoSettings(topic=topic, group="echo"))))
        for name in names:
            relay = Relay(name, EchoSettings(topic=f"{topic}-{name}", group=name), topic)
            await stack.enter_async_context(serving(bus, relay))
        callers = [await stack.enter_async_context(client_on(bus, name=f"caller{i}")) for i in range(2)]

        assert len(reply_subscriptions(bus)) == 1  # five clients, one reply consumer
        assert len({c.reply_topic for c in callers}) == 1
        answers = await asyncio.gather(*(
            c.request(f"{topic}-{name}", EchoRequest(text=f"{i}-{name}"), EchoResponse, timeout=60)
            for i, c in enumerate(callers) for name in names
        ))
        assert [a.text for a in answers] == [f"{name}:{i}-{name}" for i in range(2) for name in names]
        assert [c.stats.answered for c in callers] == [3, 3]
        assert all(c.stats.late == c.stats.duplicates == 0 for c in callers) and no_foreign(callers)
    assert reply_subscriptions(bus) == []  # the last client to close closed the inbox
    assert replies.router_of(bus) is None


async def test_concurrent_calls_of_two_clients_each_get_only_their_own_answers(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, EchoProcessor("echo", EchoSettings(topic=topic, group="echo"))), \
            client_on(bus, name="a") as a, client_on(bus, name="b") as b:
        calls = [
            c.request(topic, EchoRequest(text=f"{c.name}-{n}", delay_s=0.01 * (n % 3)), EchoResponse, timeout=60)
            for n in range(20) for c in (a, b)
        ]
        answers = await asyncio.gather(*calls)
        assert [r.text for r in answers] == [f"{c}-{n}" for n in range(20) for c in "ab"]
        for c in (a, b):
            assert (c.stats.sent, c.stats.answered, c.in_flight) == (20, 20, 0)
            assert c.stats.late == c.stats.duplicates == 0
        assert no_foreign([a, b])


async def test_a_late_reply_to_a_closed_client_is_counted_there_and_harms_no_other(open_bus, topic):
    bus = await open_bus()
    async with manual_service(bus, topic) as next_request, client_on(bus, name="stays") as stays:
        leaves = await RequestClient(bus, name="leaves").start()
        abandoned = asyncio.ensure_future(leaves.request(topic, EchoRequest(text="x"), EchoResponse, timeout=60))
        orphan = await next_request()
        await leaves.close()
        with pytest.raises(ClientClosed):
            await abandoned
        assert len(reply_subscriptions(bus)) == 1  # the other client still reads the inbox

        await answer(bus, orphan, "too late")  # reaches the shared inbox before the next answer
        call = asyncio.ensure_future(stays.request(topic, EchoRequest(text="y"), EchoResponse, timeout=60))
        request = await next_request()
        await answer(bus, request, "yours")
        await answer(bus, request, "yours again")
        await answer(bus, orphan, "later still")
        assert (await call).text == "yours"
        # One more round trip: every reply above has been read once its answer is.
        call = asyncio.ensure_future(stays.request(topic, EchoRequest(text="z"), EchoResponse, timeout=60))
        await answer(bus, await next_request(), "last")
        assert (await call).text == "last"

        assert (leaves.stats.late, leaves.stats.duplicates) == (2, 0)
        assert (stays.stats.answered, stays.stats.late, stays.stats.duplicates) == (2, 0, 1)
        assert stays.stats.foreign == 0 or stays.bus.url.startswith("kafka")  # see no_foreign


async def test_a_reply_no_client_asked_for_is_foreign_to_every_client_reading_the_inbox(open_bus, topic):
    bus = await open_bus()
    async with manual_service(bus, topic) as next_request, client_on(bus, name="a") as a, \
            client_on(bus, name="b") as b:
        await bus.publish(a.reply_topic, encode(EchoResponse(text="?")), {REQUEST_ID: "nobody-asked"})
        call = asyncio.ensure_future(b.request(topic, EchoRequest(text="y"), EchoResponse, timeout=60))
        await answer(bus, await next_request(), "yours")
        assert (await call).text == "yours"
        assert a.stats.foreign == b.stats.foreign >= 1  # exactly 1 but on Kafka (see no_foreign)
        assert a.stats.foreign == 1 or a.bus.url.startswith("kafka")


async def test_streams_of_two_clients_share_the_inbox_piece_by_piece(open_bus, topic):
    bus = await open_bus()
    async with serving(bus, StreamingEcho("echo", EchoSettings(topic=topic, group="echo"))), \
            client_on(bus, name="a") as a, client_on(bus, name="b") as b:

        async def words(client: RequestClient, text: str) -> list[str]:
            return [p.text async for p in client.stream(topic, EchoRequest(text=text), EchoPiece, timeout=60)]

        got = await asyncio.gather(words(a, "one two three"), words(b, "four five"), words(a, "six"))
        assert got == [["one", "two", "three", "one two three"], ["four", "five", "four five"], ["six", "six"]]
        assert (a.stats.answered, b.stats.answered) == (2, 1)
        assert all(c.stats.duplicates == 0 for c in (a, b)) and no_foreign([a, b])


async def test_the_last_client_to_close_closes_the_inbox_and_the_next_opens_a_fresh_one(open_bus, topic):
    bus = await open_bus()
    clients = await asyncio.gather(*(RequestClient(bus, name=f"c{i}").start() for i in range(4)))  # racing starts
    assert len(reply_subscriptions(bus)) == 1
    router = replies.router_of(bus)
    assert router is not None and router.owners == 4
    for i, c in enumerate(clients):
        await c.close()
        await c.close()  # twice is harmless
        assert len(reply_subscriptions(bus)) == (1 if i < 3 else 0)
    assert replies.router_of(bus) is None and not router.reading
    with pytest.raises(ClientClosed):
        await clients[0].request(topic, EchoRequest(text="x"), EchoResponse, timeout=1)

    async with manual_service(bus, topic) as next_request, client_on(bus, name="again") as again:
        assert len(reply_subscriptions(bus)) == 1 and replies.router_of(bus) is not router
        call = asyncio.ensure_future(again.request(topic, EchoRequest(text="y"), EchoResponse, timeout=60))
        request = await next_request()
        assert decode(request.body, EchoRequest).text == "y"
        await answer(bus, request, "fresh")
        assert (await call).text == "fresh"


async def test_clients_on_different_buses_do_not_share(open_bus):
    first, second = await open_bus(), await open_bus()
    async with client_on(first, name="a"), client_on(second, name="b"):
        assert len(reply_subscriptions(first)) == len(reply_subscriptions(second)) == 1
        assert replies.router_of(first) is not replies.router_of(second)
