#!/usr/bin/env python3
"""Benchmark the bus's request/response path against what each backend is built on.

    python scripts/bench_bus.py [--quick]

One run starts the Kafka (Tansu) and Pulsar (Pulsar Lite) test brokers on
loopback, measures every backend next to its baseline, and stops the brokers
again, also on error or Ctrl-C.

The workload is the one processors put on the bus: request/response. A client
publishes a request with ``request-id`` and ``reply-to`` headers; a server on
its own connection subscribes to the request topic (group "server"), echoes
each body to ``reply-to`` with the same ``request-id`` and acks; the client's
one reader task matches replies to waiting futures by ``request-id``.

- latency: one request in flight at a time; p50 and p99 of the round trip.
- throughput: 64 concurrent requesters, a server handling up to 64 deliveries
  at once (a task each); completed round trips per second.

Baselines run the very same client and server loops, so a ratio isolates what
our layer adds rather than what the broker costs:

- memory bus vs a direct ``await`` chain: the client awaits the server
  function, whose reply reaches the caller through a future resolved by a
  separate reader task (an in-process call with no bus at all);
- kafka bus vs raw aiokafka: producer plus group-subscribed consumer
  (fetch_max_wait_ms=5, earliest, no commits) on 4-partition topics like ours;
- pulsar bus vs raw pulsar.asyncio: unbatched producers and Shared consumers
  on one client for both sides (our buses also share one client per process).

Every setup gets fresh topics and warm-up rounds before anything is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import os
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pulsar
import pulsar.asyncio as pulsar_async
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from config.bus import BusSettings, PulsarOptions
from processors.bus import Subscription, connect
from processors.bus.memory import drop_memory_broker
from processors.testing import brokers

Ack = Callable[[], Awaitable[None]]
Received = tuple[dict[str, str], bytes, Ack]
Receive = Callable[[], Awaitable[Received]]
Publish = Callable[[str, bytes, dict[str, str]], Awaitable[None]]

CONCURRENCY = 64
BODY = b"x" * 128
PARTITIONS = 4  # what the Kafka bus creates its topics with
GOALS = {"memory": 1.5, "kafka": 2.0, "pulsar": 2.0}


@dataclass(frozen=True)
class Plan:
    warm_calls: int
    lat_rounds: int
    lat_cap_s: float  # stop sampling latency early on a slow backend
    total: int  # pipelined round trips for throughput
    budget_s: float  # hard limit per setup, so a hang fails instead of stalling


FULL = Plan(warm_calls=200, lat_rounds=2000, lat_cap_s=8.0, total=4096, budget_s=60.0)
QUICK = Plan(warm_calls=50, lat_rounds=300, lat_cap_s=2.0, total=1024, budget_s=30.0)


@dataclass
class Setup:
    """The ends one contestant exposes to the shared client and server loops."""

    send: Callable[[str, bytes], Awaitable[None]]  # publish one request: (request id, body)
    replies: Receive  # the client's reply stream
    server: tuple[Receive, Publish] | None  # None: no server task (direct await)


@dataclass
class Result:
    p50_ms: float
    p99_ms: float
    rate: float
    samples: int


async def _no_ack() -> None:
    return None


async def serve(receive: Receive, publish: Publish) -> None:
    """Echo every request to its reply-to topic, up to CONCURRENCY at once."""
    limit = asyncio.Semaphore(CONCURRENCY)
    running: set[asyncio.Task[None]] = set()

    async def handle(headers: dict[str, str], body: bytes, ack: Ack) -> None:
        try:
            await publish(headers["reply-to"], body, {"request-id": headers["request-id"]})
            await ack()
        finally:
            limit.release()

    try:
        while True:
            headers, body, ack = await receive()
            await limit.acquire()
            task = asyncio.create_task(handle(headers, body, ack))
            running.add(task)
            task.add_done_callback(running.discard)
    finally:
        for task in running:
            task.cancel()


class Client:
    """Sends requests and resolves their futures from one reader task."""

    def __init__(self, setup: Setup) -> None:
        self._setup = setup
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        self._ids = itertools.count()
        self._failure: BaseException | None = None
        self._reader = asyncio.create_task(self._read())
        self._reader.add_done_callback(self.watch)

    async def _read(self) -> None:
        while True:
            headers, body, ack = await self._setup.replies()
            future = self._pending.pop(headers.get("request-id", ""), None)
            if future is not None and not future.done():
                future.set_result(body)
            await ack()

    def watch(self, task: asyncio.Task[None]) -> None:
        """Fail every waiting call when the reader or the server task dies."""
        if task.cancelled() or task.exception() is None:
            return
        self._failure = task.exception()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RuntimeError(f"benchmark task died: {self._failure!r}"))

    async def call(self, body: bytes) -> bytes:
        if self._failure is not None:
            raise RuntimeError(f"benchmark task died: {self._failure!r}")
        rid = str(next(self._ids))
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        await self._setup.send(rid, body)
        return await future

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def pipelined(client: Client, total: int) -> float:
    """Seconds for ``total`` round trips spread over CONCURRENCY requesters."""

    async def requester(count: int) -> None:
        for _ in range(count):
            await client.call(BODY)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for i in range(CONCURRENCY):
            group.create_task(requester(total // CONCURRENCY + (i < total % CONCURRENCY)))
    return time.perf_counter() - start


async def measure(client: Client, plan: Plan) -> Result:
    for _ in range(plan.warm_calls):
        await client.call(BODY)
    await pipelined(client, CONCURRENCY * 8)
    samples: list[float] = []
    deadline = time.perf_counter() + plan.lat_cap_s
    while len(samples) < plan.lat_rounds and time.perf_counter() < deadline:
        start = time.perf_counter()
        await client.call(BODY)
        samples.append(time.perf_counter() - start)
    samples.sort()
    elapsed = await pipelined(client, plan.total)
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] * 1000  # noqa: E731
    return Result(pick(0.50), pick(0.99), plan.total / elapsed, len(samples))


async def run(setup_cm: contextlib.AbstractAsyncContextManager[Setup], plan: Plan) -> Result:
    async with setup_cm as setup:
        client = Client(setup)
        server = asyncio.create_task(serve(*setup.server)) if setup.server else None
        if server is not None:
            server.add_done_callback(client.watch)
        try:
            return await asyncio.wait_for(measure(client, plan), plan.budget_s)
        finally:
            await client.close()
            if server is not None:
                server.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await server


def _topics() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"bench-req-{tag}", f"bench-rep-{tag}", tag


@contextlib.asynccontextmanager
async def direct_setup() -> AsyncIterator[Setup]:
    replies: asyncio.Queue[Received] = asyncio.Queue()

    async def server(rid: str, body: bytes) -> None:  # the work the bus server does, minus the bus
        replies.put_nowait(({"request-id": rid}, body, _no_ack))

    yield Setup(send=server, replies=replies.get, server=None)


def _from_sub(sub: Subscription) -> Receive:
    async def receive() -> Received:
        d = await sub.receive()
        return d.headers, d.body, d.ack

    return receive


@contextlib.asynccontextmanager
async def bus_setup(url: str, settings: BusSettings) -> AsyncIterator[Setup]:
    requests, reply_to, tag = _topics()
    if url.startswith("memory://"):
        url = f"memory://bench{tag}"
    try:
        async with await connect(url, settings) as server_bus, await connect(url, settings) as client_bus:
            server_sub = await server_bus.subscribe(requests, "server")
            client_sub = await client_bus.subscribe(reply_to, f"client-{tag}")

            async def send(rid: str, body: bytes) -> None:
                await client_bus.publish(requests, body, {"request-id": rid, "reply-to": reply_to})

            yield Setup(send, _from_sub(client_sub), (_from_sub(server_sub), server_bus.publish))
    finally:
        drop_memory_broker(f"bench{tag}")


@contextlib.asynccontextmanager
async def raw_kafka_setup(bootstrap: str) -> AsyncIterator[Setup]:
    requests, reply_to, tag = _topics()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (requests, reply_to)])
    finally:
        await admin.close()
    async with contextlib.AsyncExitStack() as stack:

        async def started(client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
            await client.start()
            stack.push_async_callback(client.stop)

        consumers = {
            topic: AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, fetch_max_wait_ms=5,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
            for topic, group in ((requests, "server"), (reply_to, f"client-{tag}"))
        }
        producers = [AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0) for _ in range(2)]
        for c in [*consumers.values(), *producers]:
            await started(c)
        for c in consumers.values():  # messages sent before the join would still arrive; wait anyway
            for _ in range(300):
                if c.assignment():
                    break
                await asyncio.sleep(0.1)

        def receive(consumer: AIOKafkaConsumer) -> Receive:
            async def next_record() -> Received:
                r = await consumer.getone()
                return {k: v.decode() for k, v in r.headers or ()}, r.value or b"", _no_ack

            return next_record

        def publish(producer: AIOKafkaProducer) -> Publish:
            async def send(topic: str, body: bytes, headers: dict[str, str]) -> None:
                await producer.send_and_wait(topic, body, headers=[(k, v.encode()) for k, v in headers.items()])

            return send

        client_publish = publish(producers[0])

        async def send(rid: str, body: bytes) -> None:
            await client_publish(requests, body, {"request-id": rid, "reply-to": reply_to})

        yield Setup(send, receive(consumers[reply_to]), (receive(consumers[requests]), publish(producers[1])))


@contextlib.asynccontextmanager
async def raw_pulsar_setup(url: str) -> AsyncIterator[Setup]:
    requests, reply_to, tag = _topics()
    full = lambda t: f"persistent://public/default/{t}"  # noqa: E731
    client = pulsar_async.Client(url, operation_timeout_seconds=10, logger=logging.getLogger("pulsar.raw"))
    try:
        producers = {t: await client.create_producer(full(t), batching_enabled=False) for t in (requests, reply_to)}
        consumers = {
            t: await client.subscribe(full(t), group, consumer_type=pulsar.ConsumerType.Shared,
                                      initial_position=pulsar.InitialPosition.Earliest)
            for t, group in ((requests, "server"), (reply_to, f"client-{tag}"))
        }

        def receive(consumer: pulsar_async.Consumer) -> Receive:
            async def next_message() -> Received:
                m = await consumer.receive()
                return m.properties(), m.data(), lambda: consumer.acknowledge(m)

            return next_message

        async def publish(topic: str, body: bytes, headers: dict[str, str]) -> None:
            await producers[topic].send(body, properties=headers)

        async def send(rid: str, body: bytes) -> None:
            await publish(requests, body, {"request-id": rid, "reply-to": reply_to})

        yield Setup(send, receive(consumers[reply_to]), (receive(consumers[requests]), publish))
    finally:
        with contextlib.suppress(Exception):
            await client.close()


def table(backend: str, baseline_name: str, ours: Result, base: Result) -> None:
    goal = GOALS[backend]
    ratios = (ours.p50_ms / base.p50_ms, ours.p99_ms / base.p99_ms, base.rate / ours.rate)
    print(f"\n{backend}  (baseline: {baseline_name}; goal: ours within {goal}x)")
    print(f"  {'setup':<22}{'p50 ms':>10}{'p99 ms':>10}{'msg/s':>11}{'n lat':>8}")
    for name, r in ((f"{backend} bus", ours), (baseline_name, base)):
        print(f"  {name:<22}{r.p50_ms:>10.3f}{r.p99_ms:>10.3f}{r.rate:>11,.0f}{r.samples:>8}")
    cells = "".join(f"{f'{x:.2f}x':>10}" for x in ratios[:2]) + f"{f'{ratios[2]:.2f}x':>11}"
    misses = [n for n, x in zip(("p50", "p99", "msg/s"), ratios) if x > goal]
    verdict = "within goal" if not misses else "over goal: " + ", ".join(misses)
    print(f"  {'ratio (>1 = slower)':<22}{cells}  {verdict}", flush=True)


async def bench(kafka_url: str, pulsar_url: str, plan: Plan) -> None:
    pulsar_settings = BusSettings(pulsar=PulsarOptions(consumer_id_spread=8))
    bootstrap = kafka_url.removeprefix("kafka://")
    contests = [
        ("memory", "direct await", lambda: bus_setup("memory://", BusSettings()), direct_setup),
        ("kafka", "raw aiokafka", lambda: bus_setup(kafka_url, BusSettings()), lambda: raw_kafka_setup(bootstrap)),
        ("pulsar", "raw pulsar-client", lambda: bus_setup(pulsar_url, pulsar_settings),
         lambda: raw_pulsar_setup(pulsar_url)),
    ]
    for backend, baseline_name, ours, baseline in contests:
        base = await run(baseline(), plan)
        mine = await run(ours(), plan)
        table(backend, baseline_name, mine, base)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (about a minute in all)")
    plan = QUICK if parser.parse_args().quick else FULL
    print(f"cpu_count={os.cpu_count()}  python {sys.version.split()[0]}  mode={'quick' if plan is QUICK else 'full'}")
    print(f"latency: up to {plan.lat_rounds} sequential round trips (at most {plan.lat_cap_s:g}s); "
          f"throughput: {plan.total} round trips, {CONCURRENCY} in flight; {len(BODY)} B bodies")
    print("goals: memory within 1.5x of direct await; Kafka and Pulsar within 2x of their raw clients")
    print("ratio = ours/baseline for latency, baseline/ours for throughput (>1 means ours is slower)")
    workdir = brokers.make_workdir()
    started: list[brokers.BrokerProcess] = []
    try:
        for factory in (brokers.tansu, brokers.pulsar_lite):
            started.append(factory(workdir))
            started[-1].start()
        asyncio.run(bench(started[0].url, started[1].url, plan))
    finally:
        for broker in reversed(started):
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
