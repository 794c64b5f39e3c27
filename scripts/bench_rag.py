"""A hybrid document-rag query end to end, four ways side by side in one run.

    python -m scripts.bench_rag [--queries 200] [--backends direct,memory,kafka,pulsar]

(a) direct: the same ``DocumentRag`` whose clients call the processors'
    ``handle`` in this process (no bus, no encoding);
(b) memory: every processor a task of this process on ``memory://``, the
    question sent to document-rag through ``DocumentRagClient``;
(c) kafka / (d) pulsar: the same over Apache Kafka / Apache Pulsar on loopback,
    started here from the installed jars (``ragbus brokers --install``), with ragbus's production
    defaults; ``RAGBUS_TEST_KAFKA=light`` / ``RAGBUS_TEST_PULSAR=light`` measure Tansu / Pulsar Lite
    instead, with their own settings (processors/testing/selection.py).

The corpus is the Python language reference (``pydoc_data.topics``),
ingested once into a temporary data dir, with the sample graph. Each
backend answers the same questions, hybrid mode, graph path on, at
concurrency 1 and 32. For Kafka and Pulsar it also measures the raw client
library's ping-pong on the same broker (scripts.bench.pingpong's baseline: an
echo server and a caller on the bare aiokafka / pulsar-client), and prints the
latency bound a hybrid query should meet: direct p50 + 4 hops x ping-pong p50
(the critical path is ask, embed, faiss query, prompt), and the CPU floor at
concurrency 32: direct CPU per query + 6 exchanges (the ask and document-rag's
five requests) x the raw round trip's CPU (this process and the broker, 64 in
flight). What a query costs beyond the floor is, to a first approximation,
ragbus's own; the floor itself is the client's and the broker's. Beside it, the
same raw round trip spread over six request topics, an echo server consuming
each (the layout of a query's exchanges), and the floor that gives.
Printed per backend and concurrency: p50/p99 latency,
queries/s, CPU-seconds per query (this process plus, for (c)/(d), the
broker process), and the machine's limit for that cost, cores / CPU-s per
query, with queries/s as a share of it; with each row's progress line, its CPU
per query by thread (the event loop, each processor's thread, the native ones:
onnxruntime's pool and the bus clients') and the broker's. Before each bus backend's load it
measures the pipeline's idle CPU (this process plus the broker, --idle-seconds)
and prints CPU per query also net of it (a lower bound: the cost of the queries themselves; it
matters on Tansu, whose 5 ms polling burns CPU while idle that Apache Kafka's long poll does not).
The broker's own share of both is printed apart, and the load average beside each measurement. A backend may carry
settings of its own (``kafka+RAGBUS_BUS__KAFKA__COMMIT_INTERVAL_MS=1000``), measured as a row of
its own, so a setting is compared side by side in one run. Absolute times drift on a shared
machine; the ratios between rows of one run are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import load_settings, processor_settings
from ragbus.bus import connect
from ragbus.cli.seed import first_use
from ragbus.document_rag import DocumentRag, DocumentRagSettings
from ragbus.runtime.envelope import Envelope
from ragbus.runtime.processor import RequestContext
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import (
    DocEmbeddingsClient,
    DocumentRagClient,
    EmbedClient,
    FetchChunkClient,
    KeywordClient,
    KgClient,
    PromptClient,
)
from ragbus.runtime.worker import build_processor, processors_running
from ragbus.testing import brokers, selection
from scripts.bench import pingpong
from scripts.bench.brokers import broker_for
from scripts.bench.cpu import cpu_of, jit_cpu, thread_cpu
from scripts.bench.stats import percentile

QUESTIONS = [
    "What does the with statement do?", "How does nonlocal differ from global?", "What is __slots__ for?",
    "When does the else clause of a for loop run?", "How are exceptions raised and caught?",
    "What does yield do in a function?", "How do f-strings format values?", "What is a lambda expression?",
    "How does the import statement find modules?", "What are the rules for comparisons?",
    "What does the assert statement check?", "How is operator precedence defined?",
    "What does async def create?", "How do slicings work on sequences?", "What does del remove?",
    "Who was chancellor of Germany?", "What is the truth value of an empty list?",
    "How do augmented assignments like += work?", "What does the pass statement do?",
    "Which methods make an object a context manager?",
]
HOPS = 4  # a hybrid query's critical path: ask, embed, faiss query, prompt
# A hybrid query's request/response exchanges on the bus: the ask, and the five requests document-rag
# sends (embed, doc-embeddings-query, keyword-query, kg-query, prompt; the direct row hands over five).
EXCHANGES = 6
# Those exchanges go to six request topics (document-rag's and the five it calls), each read by its own
# consumer: the raw round trip is also measured spread over as many, beside the single-topic one.
SPREAD_TOPICS = 6
# Warm-up on a JVM broker ends after a window in which its JIT compiler took under this share of its
# CPU (on Apache Kafka: 60% in the first window after 300 questions, 2-10% two windows on), or after
# this many windows.
JIT_QUIET = 0.10
JIT_WINDOWS = 12
# What document-rag calls; (a) hands it their requests directly, (b)-(d) run them as workers.
RETRIEVAL = [name for name in pipelines.QUERY if name != "document-rag"]


class DirectClient:
    """A ``RequestClient`` stand-in that hands each request to its processor's ``handle``."""

    def __init__(self, processors: dict) -> None:
        self.processors = processors

    async def request(self, topic, message, response_type, timeout=None):
        envelope = Envelope(uuid.uuid4().hex, reply_to=None, attempt=1, deadline_ms=None, traceparent=None)
        context = RequestContext(envelope=envelope, topic=topic, delivery_attempt=1)
        return await self.processors[topic].handle(message, context)


@contextlib.asynccontextmanager
async def direct_rag(settings):
    # No bus carries the requests; the processors still hold one for what they ask of others themselves
    # (kg-query's check of a collection with no graph, which the bench's questions never make).
    async with await connect("memory://bench-direct", settings.bus) as bus, _direct_rag(settings, bus) as ask:
        yield ask


@contextlib.asynccontextmanager
async def _direct_rag(settings, bus):
    processors = {}
    for name in RETRIEVAL:
        p = build_processor(settings, name)
        p.bus = bus
        await p.start()
        processors[p.settings.topic] = p
    client = DirectClient(processors)
    deployed = processor_settings(settings, "document-rag", DocumentRagSettings)  # as the processor runs
    rag = DocumentRag(
        PromptClient(client), EmbedClient(client), DocEmbeddingsClient(client), FetchChunkClient(client),
        kw_index_client=KeywordClient(client), kg_client=KgClient(client), retrieval_mode="hybrid",
        fusion=deployed.fusion,
    )
    try:
        yield lambda q: rag.query(q, mode="hybrid")
    finally:
        for p in processors.values():
            await p.close()


@contextlib.asynccontextmanager
async def bus_rag(settings, url):
    async with (
        processors_running(settings, pipelines.QUERY, url, ready_timeout=300),
        await connect(url, settings.bus) as bus,
        RequestClient(bus, name="bench") as client,
    ):
        rag = DocumentRagClient(client, timeout=120)
        yield lambda q: rag.ask(q, mode="hybrid")


async def idle_rate(seconds: float, broker_pid: int | None) -> tuple[float, float]:
    """CPU seconds per second this process and the broker burn with the pipeline up and no question asked.

    On Tansu (its settings: brokers.LIGHT_BROKER_ENV) each Kafka consumer polls every 5 ms, so a
    pipeline of a dozen consumers costs CPU while idle that Apache Kafka's long poll does not.
    Returns the rate of both together and the broker's share of it.
    """
    if seconds <= 0:
        return 0.0, 0.0
    cpu0, broker0, wall0 = time.process_time(), cpu_of(broker_pid), time.perf_counter()
    await asyncio.sleep(seconds)
    wall, broker = time.perf_counter() - wall0, cpu_of(broker_pid) - broker0
    return (time.process_time() - cpu0 + broker) / wall, broker / wall


async def warm_up(ask, total: int, concurrency: int = 8) -> None:
    questions = iter([QUESTIONS[i % len(QUESTIONS)] for i in range(total)])

    async def worker():
        for q in questions:
            await ask(q)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def warm_until_compiled(ask, broker_pid: int | None, window: int, *, quiet: float = JIT_QUIET,
                              most: int = JIT_WINDOWS) -> None:
    """Windows of ``window`` questions until the broker's JIT compiler took under ``quiet`` of its CPU in one.

    At most ``most`` windows (a JVM may recompile now and then for good); each window's share is printed.
    """
    for n in range(1, most + 1):
        jit0, broker0 = jit_cpu(broker_pid), cpu_of(broker_pid)
        await warm_up(ask, window)
        broker = cpu_of(broker_pid) - broker0
        share = (jit_cpu(broker_pid) - jit0) / broker if broker > 0 else 0.0
        print(f"  warm-up window {n}: the broker's JIT compiler {share:.0%} of its CPU", file=sys.stderr)
        if share < quiet:
            return
    print(f"  warm-up: the JIT compiler still above {quiet:.0%} after {most} windows; measuring anyway",
          file=sys.stderr)


async def measure(ask, concurrency: int, total: int, broker_pid: int | None, idle: tuple = (0.0, 0.0)) -> dict:
    for q in QUESTIONS[:4]:  # warm up: first loads, first connections
        await ask(q)
    latencies: list[float] = []
    questions = iter([QUESTIONS[i % len(QUESTIONS)] for i in range(total)])

    async def worker():
        for q in questions:
            t0 = time.perf_counter()
            await ask(q)
            latencies.append(time.perf_counter() - t0)

    threads0 = thread_cpu()
    cpu0, broker0, wall0 = time.process_time(), cpu_of(broker_pid), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - wall0
    broker = cpu_of(broker_pid) - broker0
    by_thread = {name: s - threads0.get(name, 0.0) for name, s in thread_cpu().items()}
    cpu = time.process_time() - cpu0 + broker
    cpu_per_query = cpu / total
    limit = (os.cpu_count() or 1) / cpu_per_query
    # Net of the idle rate over the same wall time: a lower bound, as busy consumers poll less.
    net_ms = max(cpu - idle[0] * wall, 0.0) / total * 1e3
    return {"p50": percentile(latencies, 50) * 1e3, "p99": percentile(latencies, 99) * 1e3, "qps": total / wall,
            "cpu_ms": cpu_per_query * 1e3,
            "broker_ms": broker / total * 1e3, "net_ms": net_ms, "idle": idle[0], "idle_broker": idle[1],
            "limit": limit, "share": total / wall / limit,
            "threads": {name: s / total * 1e3 for name, s in sorted(by_thread.items(), key=lambda kv: -kv[1]) if s > 0}}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=200, help="queries per backend and concurrency")
    parser.add_argument("--backends", default="direct,memory,kafka,pulsar",
                        help="comma-separated; a backend may carry settings of its own, each one +ENV_NAME=VALUE "
                             "(e.g. kafka+RAGBUS_BUS__KAFKA__COMMIT_INTERVAL_MS=1000), measured as a row of its own")
    parser.add_argument("--warmup", type=int, default=300,
                        help="questions asked (8 in flight) before a bus backend's idle window and rows; on a "
                             "broker started here, windows of that many until its JIT compiler takes under "
                             f"{JIT_QUIET * 100:.0f}%% of its CPU in one (at most {JIT_WINDOWS}): a JVM broker just "
                             "started runs its hot paths interpreted until its JIT compiles them")
    parser.add_argument("--idle-seconds", type=float, default=5.0,
                        help="before each backend's load, measure its idle CPU this long (0: skip)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="bench-rag-") as tmp:  # the stores and the brokers' data: gone after
        await run(args, Path(tmp))


async def run(args, work: Path) -> None:
    wanted = args.backends.split(",")
    data_dir = work / "data"
    os.environ["RAGBUS_DATA_DIR"] = str(data_dir)
    settings = load_settings(environ={})
    print(f"ingesting the corpus and the sample graph into {data_dir}", file=sys.stderr)
    async with (
        processors_running(settings, pipelines.EVERYTHING, "memory://bench-ingest", ready_timeout=300),
        await connect("memory://bench-ingest") as bus,
        RequestClient(bus, name="ingest") as client,
    ):
        await first_use(client, settings, "default")

    rows = []
    raw_trips: dict[str, pingpong.Result] = {}  # the raw client library's round trip on the same broker
    spread_trips: dict[str, pingpong.Result] = {}  # the same, spread over the query's request topics
    started: list[brokers.BrokerProcess] = []
    try:
        for n, spec in enumerate(wanted):
            # A backend with settings of its own: kafka+RAGBUS_BUS__KAFKA__LINGER_MS=1 (a row of its own).
            kind, *overrides = spec.split("+")
            backend = spec if overrides else kind
            broker = None
            if kind in ("kafka", "pulsar"):
                (work / f"broker-{n}").mkdir()
                broker = broker_for(kind, work / f"broker-{n}").start()
                started.append(broker)
            own = dict(o.split("=", 1) for o in overrides)
            run_settings = load_settings(environ={**selection.broker_env(), **own})
            if kind == "direct":
                opened = direct_rag(run_settings)
            else:
                url = broker.url if broker else "memory://bench-rag"
                opened = bus_rag(run_settings, url)
            print(f"{backend}: measuring", file=sys.stderr)
            async with opened as ask:
                pid = broker.process.pid if broker and broker.process else None
                await ask(QUESTIONS[0])  # every processor up and connected before the idle window
                if kind != "direct" and args.warmup:
                    if pid is None:
                        await warm_up(ask, args.warmup)
                    else:  # a JVM broker: until its JIT has compiled what a query runs
                        await warm_until_compiled(ask, pid, args.warmup)
                idle = await idle_rate(args.idle_seconds if kind != "direct" else 0, pid)
                print(f"  idle: {idle[0]:.0%} of a core, the broker {idle[1]:.0%}; load average "
                      f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
                for concurrency in (1, 32):
                    r = await measure(ask, concurrency, args.queries, pid, idle)
                    rows.append((backend, concurrency, r))
                    print(f"  concurrency {concurrency}: p50 {r['p50']:.1f} ms, {r['qps']:.1f} q/s, "
                          f"{r['cpu_ms']:.1f} CPU ms/query (broker {r['broker_ms']:.1f}); load average "
                          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
                    print(f"    CPU ms/query by thread: {', '.join(f'{k} {v:.2f}' for k, v in r['threads'].items())}"
                          + (f", broker {r['broker_ms']:.2f}" if pid else ""), file=sys.stderr)
            # After the pipeline, not before: pulsar-client keeps the logger of the first client a process
            # makes, so the pipeline's bus must make it, as it does in a worker (the raw client's own logger
            # would otherwise be the pipeline's too, and cost it a GIL hand-off per C++ DEBUG line).
            if broker is not None:
                raw = (pingpong.raw_kafka_setup(broker.url.removeprefix("kafka://")) if kind == "kafka"
                       else pingpong.raw_pulsar_setup(broker.url))
                raw_trips[backend] = await pingpong.run(pingpong.echo_bench(raw), pingpong.QUICK,
                                                        extra_cpu=functools.partial(cpu_of, pid))
                spread_trips[backend] = await pingpong.run(pingpong.spread_echo_bench(raw, SPREAD_TOPICS),
                                                           pingpong.QUICK, extra_cpu=functools.partial(cpu_of, pid))
    finally:
        for broker in started:
            broker.stop()

    base = {c: r for b, c, r in rows if b == "direct"}
    print()
    print("| backend | concurrency | p50 ms | p99 ms | queries/s | CPU ms/query | of it broker | idle CPU % (broker) "
          "| CPU ms/query net of idle | machine limit q/s | share of limit | p50 vs direct | q/s vs direct "
          "| CPU vs direct | net CPU vs direct |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for backend, c, r in rows:
        d = base.get(c)
        vs = (f"{r['p50'] / d['p50']:.2f}x | {r['qps'] / d['qps']:.2f}x | {r['cpu_ms'] / d['cpu_ms']:.2f}x "
              f"| {r['net_ms'] / d['cpu_ms']:.2f}x") if d else "- | - | - | -"
        print(f"| {backend} | {c} | {r['p50']:.1f} | {r['p99']:.1f} | {r['qps']:.1f} | {r['cpu_ms']:.1f} "
              f"| {r['broker_ms']:.1f} | {r['idle']:.0%} ({r['idle_broker']:.0%}) | {r['net_ms']:.1f} "
              f"| {r['limit']:.1f} | {r['share']:.0%} | {vs} |")
    for backend, trip in raw_trips.items():
        for c, r in ((c, r) for b, c, r in rows if b == backend):
            d = base.get(c)
            if d is None:
                continue
            if c == 1:
                bound = d["p50"] + HOPS * trip.p50_ms
                print(f"\n{backend}: raw ping-pong p50 {trip.p50_ms:.1f} ms; bound at c=1 = direct {d['p50']:.1f} + "
                      f"{HOPS} x {trip.p50_ms:.1f} = {bound:.1f} ms ({bound / d['p50']:.2f}x direct); "
                      f"measured {r['p50']:.1f} ms ({r['p50'] / bound:.2f}x the bound)")
            else:
                floor = d["cpu_ms"] + EXCHANGES * trip.cpu_ms
                print(f"{backend}: raw round trip {trip.cpu_ms:.2f} CPU ms (this process and the broker, "
                      f"{pingpong.CONCURRENCY} in flight); floor at c={c} = direct {d['cpu_ms']:.1f} + "
                      f"{EXCHANGES} x {trip.cpu_ms:.2f} = {floor:.1f} CPU ms/query "
                      f"({floor / d['cpu_ms']:.2f}x direct); "
                      f"measured {r['cpu_ms']:.1f} ({r['cpu_ms'] / floor:.2f}x the floor)")
                spread = spread_trips[backend]
                spread_floor = d["cpu_ms"] + EXCHANGES * spread.cpu_ms
                print(f"{backend}: the raw round trip spread over {SPREAD_TOPICS} request topics, a consumer each "
                      f"(a query's layout), {spread.cpu_ms:.2f} CPU ms, p50 {spread.p50_ms:.1f} ms; floor at c={c} "
                      f"in that layout = {spread_floor:.1f} CPU ms/query; "
                      f"measured {r['cpu_ms'] / spread_floor:.2f}x it")


if __name__ == "__main__":
    asyncio.run(main())
