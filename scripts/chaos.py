"""Longer fault runs than the test suite's: replicas killed and restarted, the broker restarted, under load.

    python -m scripts.chaos --backend kafka --queries 2000 --concurrency 64
    python -m scripts.chaos --backend pulsar --queries 5000 --kill-every 15 --restart-broker

Starts its own broker (Apache Kafka or Apache Pulsar; Tansu or Pulsar Lite with
``RAGBUS_TEST_KAFKA=light`` / ``RAGBUS_TEST_PULSAR=light``) and
``--workers`` worker processes, each running every query processor; ingests
the corpus (``--corpus full``: the Python language reference; ``small``: its
first ten topics) and the sample graph; then sends document-rag questions
from one caller at ``--concurrency``. Every ``--kill-every`` seconds a
random worker gets SIGKILL and a new one starts ``--restart-after`` seconds
later; with ``--restart-broker`` (not on Tansu: it keeps no data across a
restart) the broker is restarted once, a third of the way in. The report
accounts for every call: answered, degraded, error responses by type, lost
(no response in time), and what the caller dropped as duplicates or late.
Exits 1 if any call was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import uuid
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import bus_settings
from ragbus.bus import connect
from ragbus.ingestion import builtin_corpus
from ragbus.testing.stores import build_stores
from ragbus.runtime.request_client import RequestClient
from ragbus.testing import brokers, selection
from ragbus.testing.chaos import QueryLoad, WorkerProcess, worker_env
from scripts.bench.brokers import broker_for

QUESTIONS = [
    "What does the with statement do?", "How does nonlocal differ from global?", "What is __slots__ for?",
    "When does the else clause of a for loop run?", "How are exceptions raised and caught?",
    "What does yield do in a function?", "What is a lambda expression?", "Who was chancellor of Germany?",
    "How does the import statement find modules?", "What does the assert statement check?",
]


async def run(args, broker, workdir: Path, workers: list[WorkerProcess]):
    """Ingest, start the workers (into ``workers``, for the caller to stop), load and break things."""
    collection = "default"
    docs = builtin_corpus(collection)
    if args.corpus == "small":
        docs = docs[:10]
    print(f"{broker.name} on {broker.url}; ingesting {len(docs)} documents into {workdir}", file=sys.stderr)
    await build_stores(str(workdir), collection, docs)
    env = worker_env(str(workdir), uuid.uuid4().hex[:8])
    workers.extend(await asyncio.gather(*(WorkerProcess(pipelines.QUERY, broker.url, env).start()
                                          for _ in range(args.workers))))
    kills = 0
    settings = bus_settings(environ=selection.broker_env())
    async with await connect(broker.url, settings) as bus, \
            RequestClient(bus, name="chaos", timeout_s=args.timeout, resend_after_s=10) as client:
        load = QueryLoad(client, QUESTIONS, total=args.queries, concurrency=args.concurrency,
                         timeout=args.timeout, collection=collection)
        running = asyncio.ensure_future(load.run())

        async def faults() -> None:
            nonlocal kills
            rng = random.Random(1)
            while args.kill_every > 0:
                await asyncio.sleep(args.kill_every)
                victim = rng.randrange(len(workers))
                workers[victim].kill()
                kills += 1
                print(f"  killed worker {workers[victim].pid} at {load.report.finished} calls", file=sys.stderr)
                await asyncio.sleep(args.restart_after)
                await workers[victim].stop()
                workers[victim] = await WorkerProcess(pipelines.QUERY, broker.url, env).start()

        async def restart_broker() -> None:
            await load.reached(args.queries // 3)
            in_flight = load.report.sent - load.report.finished
            print(f"  restarting {broker.name} with {in_flight} calls in flight", file=sys.stderr)
            await asyncio.to_thread(broker.restart)

        extra = [asyncio.ensure_future(faults())]
        if args.restart_broker:
            extra.append(asyncio.ensure_future(restart_broker()))
        report = await running
        for task in extra:
            task.cancel()
        await asyncio.gather(*extra, return_exceptions=True)
    return report, kills


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["kafka", "pulsar"], default="pulsar")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds between kills (0 = none)")
    parser.add_argument("--restart-after", type=float, default=3.0, help="seconds a killed worker stays dead")
    parser.add_argument("--restart-broker", action="store_true")
    parser.add_argument("--timeout", type=float, default=60.0, help="each call's deadline")
    parser.add_argument("--corpus", choices=["small", "full"], default="small")
    args = parser.parse_args()
    if args.restart_broker and args.backend == "kafka" and selection.choice("kafka") == "light":
        parser.error("--restart-broker needs Apache Kafka or Pulsar: the Tansu test broker keeps topics in memory")
    logging.basicConfig(level=logging.ERROR)

    with brokers.temporary_workdir() as workdir:  # the broker's data, the stores and logs: gone after the run
        broker = broker_for(args.backend, workdir).start()
        workers: list[WorkerProcess] = []
        try:
            report, kills = await run(args, broker, workdir, workers)
        finally:  # whatever failed, no broker or worker outlives the run
            for w in workers:
                await w.stop()
            broker.stop()
    print(f"{args.backend}: {args.queries} queries at concurrency {args.concurrency}, {kills} worker kill(s)"
          f"{', broker restarted' if args.restart_broker else ''}")
    print(report.line())
    return 1 if report.lost else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
