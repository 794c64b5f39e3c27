"""Where one hop's time goes: timestamps per message along hybrid queries, on one bus.

    python -m scripts.trace_hops [--queries 60] [--backend pulsar]

Runs py's pipeline (the query processors and the caller in this
process, on the test brokers' settings) and stamps every request document-rag
makes, and the caller's own, at each step the runtime passes: the publish
called and returned (the broker's receipt), the request received by the
processor's subscription, its handler started and ended, the reply's publish
returned (its receipt), the reply received by the caller's inbox, and the call
resumed. Prints per
topic the median and p90 of each step, in ms since the call started; a step
that takes longer than on the memory bus, or than a raw ping-pong leg
(scripts.bench_bus), is where to look. The runtime's steps are stamped by a
middleware (ragbus.runtime.middleware: the call, the handler, the reply routed),
the bus's by wrapping its publish and receive; each stamp costs a few
microseconds; compare rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections import defaultdict

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.base import Bus, Subscription
from ragbus.testing.stores import build_stores
from ragbus.runtime import middleware
from ragbus.runtime import request_client as client
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.envelope import REQUEST_ID
from ragbus.runtime.worker import processors_running, put_stores_in
from ragbus.testing import brokers, selection
from ragbus.schema.topics import REPLY_PREFIX
from scripts.bench.brokers import broker_for
from scripts.bench.hops import COLLECTION, DOCUMENTS, QUESTIONS
from scripts.bench.stats import percentile

STEPS = ["publish called", "publish returned", "received", "handler started", "handler ended",
         "reply receipt", "reply received", "call resumed"]
_stamps: dict[str, dict[str, float]] = defaultdict(dict)  # request id -> step -> perf_counter
_topics: dict[str, str] = {}  # request id -> topic of the call


def _stamp(request_id: str, step: str) -> None:
    _stamps[request_id].setdefault(step, time.perf_counter())


class Stamps(middleware.Middleware):
    """The runtime's steps of a call and of its handling, stamped through its middleware hooks."""

    async def call(self, call, call_next):
        _topics[call.request_id] = call.topic
        _stamp(call.request_id, "call")
        try:
            return await call_next(call)
        finally:
            _stamp(call.request_id, "call resumed")

    def handle_started(self, context) -> None:
        _stamp(context.request_id, "handler started")

    def handle_ended(self, context) -> None:
        _stamp(context.request_id, "handler ended")

    def reply_routed(self, delivery) -> None:
        _stamp(delivery.headers.get(REQUEST_ID, ""), "reply received")


def _wrap() -> None:
    """The bus's steps, below the runtime's hooks: a publish called and returned, a delivery received."""
    publish, receive = Bus.publish, Subscription.receive

    async def stamped_publish(self, topic, body, headers=None, key=None):
        request_id = (headers or {}).get(REQUEST_ID, "")
        reply = topic.startswith(REPLY_PREFIX)
        if not reply:
            _stamp(request_id, "publish called")
        await publish(self, topic, body, headers, key)
        _stamp(request_id, "reply receipt" if reply else "publish returned")

    async def stamped_receive(self):
        d = await receive(self)
        if not self.topic.startswith(REPLY_PREFIX):
            _stamp(d.headers.get(REQUEST_ID, ""), "received")
        return d

    # Every bus's publish and receive are these base-class methods around its own _publish and _receive;
    # mypy refuses a method assigned, rightly.
    Bus.publish, Subscription.receive = stamped_publish, stamped_receive  # type: ignore[method-assign]


def report(since: float) -> None:
    by_topic: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for request_id, steps in _stamps.items():
        start = steps.get("call")
        if start is None or start < since or request_id not in _topics:
            continue
        for step, at in steps.items():
            by_topic[_topics[request_id]][step].append((at - start) * 1000)
    for topic, hops in by_topic.items():
        print(f"{topic} (n={len(hops['call'])}): ms since the call, p50 / p90")
        for step in STEPS:
            values = hops.get(step)
            if values:
                print(f"  {step:<18}{percentile(values, 50):8.2f}{percentile(values, 90):8.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--backend", default="pulsar", choices=["memory", "kafka", "pulsar"])
    args = parser.parse_args()
    _wrap()
    middleware.install(Stamps())
    with brokers.temporary_workdir() as workdir:  # the stores, the broker's data, the processors' dirs
        data_dir = str(workdir / "stores")
        os.environ.setdefault("RAGBUS_DATA_DIR", str(workdir / "processors"))
        await build_stores(data_dir, COLLECTION, DOCUMENTS)
        settings = load_settings(environ=selection.broker_env())
        put_stores_in(settings, data_dir)
        broker = None if args.backend == "memory" else broker_for(args.backend, workdir).start()
        try:
            url = broker.url if broker else f"memory://trace-{uuid.uuid4().hex[:6]}"
            async with (
                processors_running(settings, list(pipelines.QUERY), url),
                await connect(url, settings.bus) as bus,
                client.RequestClient(bus, name="trace") as caller,
            ):
                rag = DocumentRagClient(caller, timeout=60)
                since = 0.0
                for i in range(args.queries + 5):
                    if i == 5:  # after the warm-up: first loads and connections
                        since = time.perf_counter()
                    question = QUESTIONS[i % len(QUESTIONS)]
                    await rag.ask(question, mode="hybrid", collection=COLLECTION)
        finally:
            if broker is not None:
                broker.stop()
    report(since)


if __name__ == "__main__":
    asyncio.run(main())
