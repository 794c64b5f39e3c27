"""Round trips of the bus's request/response workload: through a bus, a processor, or a raw client library.

``scripts.bench_bus`` compares them; ``scripts.bench_rag`` uses the raw clients' round trip as the
floor a question's hops stand on. The client and server loops are the same for every setup, so a
ratio between two setups shows what a layer adds, not what the broker costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import operator
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, NamedTuple

import msgspec
import pulsar
import pulsar.asyncio as pulsar_async
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ragbus.config.bus import BusSettings
from ragbus.config.settings import ProcessorSettings, bus_settings
from ragbus.bus import Bus, connect
from ragbus.bus.kafka.topics import wait_for_leaders
from ragbus.bus.memory import drop_memory_broker
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.testing import selection
from ragbus.schema import Error
from scripts.bench.stats import percentile

Ack = Callable[[], Awaitable[None]]
Received = tuple[dict[str, str], bytes, Ack]
Receive = Callable[[], Awaitable[Received]]
Publish = Callable[[str, bytes, dict[str, str]], Awaitable[object]]
Ends = tuple[Receive, Publish]  # a side's ends; a setup gets (request topic, reply topic) and
# yields the client's ends and the server's (None: no server task, as in the direct-await baseline).
SetupFactory = Callable[[str, str], contextlib.AbstractAsyncContextManager[tuple[Ends, Ends | None]]]
Call = Callable[[], Awaitable[object]]
# A setup gets a fresh tag for its topic names and yields the call to measure and
# the coroutines (reply reader, server) that must run beside it.
Helpers = list[Coroutine[Any, Any, object]]
Setup = Callable[[str], contextlib.AbstractAsyncContextManager[tuple[Call, Helpers]]]

CONCURRENCY = 64
BODY = b"x" * 128
PARTITIONS = 4  # what the Kafka bus creates its topics with


class Plan(NamedTuple):
    warm_calls: int
    lat_rounds: int
    lat_cap_s: float  # stop sampling latency early on a slow backend
    total: int  # pipelined round trips for throughput
    budget_s: float  # hard limit per setup: a hang fails instead of stalling


FULL = Plan(warm_calls=200, lat_rounds=2000, lat_cap_s=8.0, total=4096, budget_s=60.0)
QUICK = Plan(warm_calls=50, lat_rounds=300, lat_cap_s=2.0, total=1024, budget_s=30.0)


class Result(NamedTuple):
    p50_ms: float
    p99_ms: float
    rate: float
    samples: int
    # CPU ms per round trip over the throughput phase: this process, plus what ``run``'s
    # ``extra_cpu`` counts (a broker's CPU seconds); client and server both run in this process.
    cpu_ms: float = 0.0


async def no_ack() -> None: ...


def receiver(get: Callable[[], Awaitable[Any]], unpack: Callable[[Any], Received]) -> Receive:
    """Adapt a client library's own receive call to (headers, body, ack)."""

    async def receive() -> Received:
        return unpack(await get())

    return receive


async def serve(receive: Receive, publish: Publish) -> None:
    """Echo every request to its reply-to topic, up to CONCURRENCY at once."""
    limit = asyncio.Semaphore(CONCURRENCY)

    async def handle(headers: dict[str, str], body: bytes, ack: Ack) -> None:
        try:
            await publish(headers["reply-to"], body, {"request-id": headers["request-id"]})
            await ack()
        finally:
            limit.release()

    async with asyncio.TaskGroup() as group:  # a failing handler stops the server with its error
        while True:
            headers, body, ack = await receive()
            await limit.acquire()
            group.create_task(handle(headers, body, ack))


async def pipelined(call: Call, total: int) -> float:
    """Seconds for ``total`` round trips spread over CONCURRENCY requesters."""

    async def requester(count: int) -> None:
        for _ in range(count):
            await call()

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for i in range(CONCURRENCY):
            group.create_task(requester(total // CONCURRENCY + (i < total % CONCURRENCY)))
    return time.perf_counter() - start


async def measure(call: Call, plan: Plan, extra_cpu: Callable[[], float] = lambda: 0.0) -> Result:
    for _ in range(plan.warm_calls):
        await call()
    await pipelined(call, CONCURRENCY * 8)
    samples: list[float] = []
    deadline = time.perf_counter() + plan.lat_cap_s
    while len(samples) < plan.lat_rounds and time.perf_counter() < deadline:
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    cpu0 = time.process_time() + extra_cpu()
    rate = plan.total / await pipelined(call, plan.total)
    cpu_ms = (time.process_time() + extra_cpu() - cpu0) / plan.total * 1000
    return Result(percentile(samples, 50) * 1000, percentile(samples, 99) * 1000, rate, len(samples), cpu_ms)


async def run(setup: Setup, plan: Plan, extra_cpu: Callable[[], float] = lambda: 0.0) -> Result:
    """Measure one setup on fresh topics, its helpers running beside the measurement.

    ``extra_cpu`` reads CPU seconds spent outside this process (a broker's) to count in ``cpu_ms``.
    """
    async with setup(uuid.uuid4().hex[:10]) as (call, helpers):
        measuring = asyncio.create_task(measure(call, plan, extra_cpu))
        tasks = [measuring, *map(asyncio.create_task, helpers)]
        try:
            done, _ = await asyncio.wait(tasks, timeout=plan.budget_s, return_when=asyncio.FIRST_COMPLETED)
            if measuring in done:
                return measuring.result()
            for task in done:
                task.result()  # a dead helper's error
                raise RuntimeError(f"a helper of the measurement stopped early: {task.get_coro()!r}")
            raise TimeoutError(f"measurement did not finish within {plan.budget_s}s")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def echo_bench(factory: SetupFactory) -> Setup:
    """The raw round trip over a setup's ends: the client's reply reader and the echo server run beside it."""

    @contextlib.asynccontextmanager
    async def setup(tag: str) -> AsyncIterator[tuple[Call, Helpers]]:
        requests, reply_to = f"bench-req-{tag}", f"bench-rep-{tag}"
        async with factory(requests, reply_to) as ((replies, publish), server):
            pending: dict[str, asyncio.Future[bytes]] = {}
            ids = itertools.count()

            async def read_replies() -> None:
                while True:
                    headers, body, ack = await replies()
                    future = pending.pop(headers.get("request-id", ""), None)
                    if future is not None and not future.done():
                        future.set_result(body)
                    await ack()

            async def call() -> bytes:
                rid = str(next(ids))
                pending[rid] = future = asyncio.get_running_loop().create_future()
                await publish(requests, BODY, {"request-id": rid, "reply-to": reply_to})
                return await future

            yield call, [read_replies(), *([serve(*server)] if server is not None else [])]

    return setup


def spread_echo_bench(factory: SetupFactory, topics: int) -> Setup:
    """``echo_bench`` with the calls spread over ``topics`` request topics, an echo server on each.

    The traffic a worker of several processors carries: requests to several topics, each read by a
    consumer of its own, the replies to one topic. Every reply reader resolves any call's reply.
    """

    @contextlib.asynccontextmanager
    async def setup(tag: str) -> AsyncIterator[tuple[Call, Helpers]]:
        reply_to = f"bench-rep-{tag}"
        requests = [f"bench-req-{tag}-{i}" for i in range(topics)]
        async with contextlib.AsyncExitStack() as stack:
            sides = [await stack.enter_async_context(factory(topic, reply_to)) for topic in requests]
            pending: dict[str, asyncio.Future[bytes]] = {}
            ids = itertools.count()

            async def read_replies(replies: Receive) -> None:
                while True:
                    headers, body, ack = await replies()
                    future = pending.pop(headers.get("request-id", ""), None)
                    if future is not None and not future.done():
                        future.set_result(body)
                    await ack()

            async def call() -> bytes:
                n = next(ids)
                rid, (_, publish) = str(n), sides[n % topics][0]
                pending[rid] = future = asyncio.get_running_loop().create_future()
                await publish(requests[n % topics], BODY, {"request-id": rid, "reply-to": reply_to})
                return await future

            helpers: Helpers = [read_replies(client[0]) for client, _ in sides]
            helpers += [serve(*server) for _, server in sides if server is not None]
            yield call, helpers

    return setup


@contextlib.asynccontextmanager
async def direct_setup(_requests: str, _reply_to: str) -> AsyncIterator[tuple[Ends, None]]:
    replies: asyncio.Queue[Received] = asyncio.Queue()

    async def server(_topic: str, body: bytes, headers: dict[str, str]) -> None:  # the echo, minus the bus
        replies.put_nowait(({"request-id": headers["request-id"]}, body, no_ack))

    yield (replies.get, server), None


@contextlib.asynccontextmanager
async def bus_pair(url: str, settings: BusSettings, name: str) -> AsyncIterator[tuple[Bus, Bus]]:
    """A server bus and a client bus, each its own connection; on memory:// a private broker ``name``."""
    bus_url = f"memory://{name}" if url == "memory://" else url
    try:
        async with await connect(bus_url, settings) as server, await connect(bus_url, settings) as client:
            yield server, client
    finally:
        drop_memory_broker(name)


def bus_setup(url: str, settings: BusSettings) -> SetupFactory:
    unpack = operator.attrgetter("headers", "body", "ack")

    @contextlib.asynccontextmanager
    async def setup(requests: str, reply_to: str) -> AsyncIterator[tuple[Ends, Ends]]:
        async with bus_pair(url, settings, requests) as (server, client):
            server_sub = await server.subscribe(requests, "server")
            client_sub = await client.subscribe(reply_to, "client")
            yield (receiver(client_sub.receive, unpack), client.publish), (
                receiver(server_sub.receive, unpack), server.publish)

    return setup


class EchoRequest(msgspec.Struct, kw_only=True):
    text: str


class EchoResponse(msgspec.Struct, kw_only=True):
    text: str = ""
    error: Error | None = None  # where the runtime puts a handler's failure


class EchoProcessor(Processor[EchoRequest, EchoResponse]):
    request_type = EchoRequest
    response_type = EchoResponse

    async def handle(self, request: EchoRequest, context: RequestContext) -> EchoResponse:
        return EchoResponse(text=request.text)


def processor_setup(url: str, settings: BusSettings) -> Setup:
    """Typed requests through RequestClient to an EchoProcessor, on the same buses as ``bus_setup``."""

    @contextlib.asynccontextmanager
    async def setup(tag: str) -> AsyncIterator[tuple[Call, Helpers]]:
        topic = f"bench-proc-{tag}"
        processor = EchoProcessor("bench-echo", ProcessorSettings(topic=topic, group="server", concurrency=CONCURRENCY))
        request = EchoRequest(text=BODY.decode())
        async with bus_pair(url, settings, topic) as (server, client_bus):
            client = await RequestClient(client_bus, name="bench").start()
            try:
                async def call() -> EchoResponse:  # the first calls also wait for the processor to join
                    response = await client.request(topic, request, EchoResponse, timeout=30)
                    if response.error is not None:
                        raise RuntimeError(f"processor answered with an error: {response.error}")
                    return response

                yield call, [processor.run(server, asyncio.Event())]  # cancelled, not stopped, at the end
            finally:
                await client.close()

    return setup


def raw_kafka_setup(bootstrap: str, fetch_max_wait_ms: int | None = None) -> SetupFactory:
    """The bare aiokafka round trip; its consumers wait for data as long as ragbus's do
    (``fetch_max_wait_ms``, None = the bus settings' value: the production default, or a light
    broker's test setting), so the baseline and the pipeline poll alike."""
    if fetch_max_wait_ms is None:
        fetch_max_wait_ms = bus_settings(environ={**os.environ, **selection.broker_env()}).kafka.fetch_max_wait_ms

    def ends(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> Ends:
        def publish(topic: str, body: bytes, headers: dict[str, str]) -> Awaitable[object]:
            return producer.send_and_wait(topic, body, headers=[(k, v.encode()) for k, v in headers.items()])

        return receiver(consumer.getone, lambda r: ({k: v.decode() for k, v in r.headers}, r.value, no_ack)), publish

    @contextlib.asynccontextmanager
    async def setup(requests: str, reply_to: str) -> AsyncIterator[tuple[Ends, Ends]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (requests, reply_to)])
            # Untimed: without it a consumer's first offset lookup may meet a leader not serving yet.
            await wait_for_leaders(admin, {requests: PARTITIONS, reply_to: PARTITIONS})
        finally:
            await admin.close()
        async with contextlib.AsyncExitStack() as stack:
            server_in, client_in = (
                AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 fetch_max_wait_ms=fetch_max_wait_ms, auto_offset_reset="earliest",
                                 enable_auto_commit=False)
                for topic, group in ((requests, "server"), (reply_to, "client"))
            )
            server_out, client_out = (AIOKafkaProducer(bootstrap_servers=bootstrap) for _ in range(2))
            for c in (server_in, client_in, server_out, client_out):  # the group joins finish in the warm-up
                await c.start()
                stack.push_async_callback(c.stop)
            yield ends(client_in, client_out), ends(server_in, server_out)

    return setup


def raw_pulsar_setup(url: str) -> SetupFactory:
    def ends(consumer: pulsar_async.Consumer, producers: dict[str, pulsar_async.Producer]) -> Ends:
        def publish(topic: str, body: bytes, headers: dict[str, str]) -> Awaitable[object]:
            return producers[topic].send(body, properties=headers)

        def unpack(m: pulsar.Message) -> Received:
            return m.properties(), m.data(), lambda: consumer.acknowledge(m)

        return receiver(consumer.receive, unpack), publish

    @contextlib.asynccontextmanager
    async def setup(requests: str, reply_to: str) -> AsyncIterator[tuple[Ends, Ends]]:
        client = pulsar_async.Client(url, operation_timeout_seconds=10, logger=logging.getLogger("pulsar.raw"))
        try:
            producers, consumers = {}, {}
            for topic, group in ((requests, "server"), (reply_to, "client")):
                name = f"persistent://public/default/{topic}"
                producers[topic] = await client.create_producer(name, batching_enabled=False)
                consumers[topic] = await client.subscribe(name, group, consumer_type=pulsar.ConsumerType.Shared,
                                                          initial_position=pulsar.InitialPosition.Earliest)
            yield ends(consumers[reply_to], producers), ends(consumers[requests], producers)
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    return setup
