"""Where a hybrid query's time goes, stage by stage, on each bus: document-rag's own timings side by side.

    python -m scripts.bench_hops [--queries 40] [--backends memory,kafka,pulsar]

Runs the query processors in this process on each backend (the test brokers: Apache Kafka and Apache
Pulsar on loopback, or the light ones with their settings), over a small collection
built here, and asks ``--queries`` hybrid questions one at a time (after five
to warm up). Prints per backend the caller's p50 and the median of each stage
document-rag reports in ``timings_ms``: embed, vector_query, keyword_query, kg
(run side by side), fetch, prompt and its total. The caller's p50 minus
document-rag's total is the outer hop (ask and answer); each stage minus the
memory row's is what the bus adds to that hop. Compare rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.testing.stores import build_stores
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.worker import processors_running, put_stores_in
from ragbus.testing import brokers, selection
from scripts.bench.brokers import broker_for
from scripts.bench.hops import COLLECTION, DOCUMENTS, QUESTIONS


async def measure(url: str, data_dir: str, queries: int) -> tuple[float, dict[str, float]]:
    settings = load_settings(environ=selection.broker_env())
    put_stores_in(settings, data_dir)
    async with (
        processors_running(settings, list(pipelines.QUERY), url),
        await connect(url, settings.bus) as bus,
        RequestClient(bus, name="hops") as client,
    ):
        rag = DocumentRagClient(client, timeout=60)
        stages: dict[str, list[float]] = {}
        latencies = []
        for i in range(queries + 5):
            started = time.perf_counter()
            response = await rag.ask(QUESTIONS[i % len(QUESTIONS)], mode="hybrid", collection=COLLECTION)
            if i < 5:
                continue  # warm-up: first loads and connections
            latencies.append((time.perf_counter() - started) * 1000)
            for stage, ms in response.timings_ms.items():
                stages.setdefault(stage, []).append(ms)
    return statistics.median(latencies), {k: statistics.median(v) for k, v in stages.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--backends", default="memory,kafka,pulsar")
    args = parser.parse_args()
    order = ["embed", "vector_query", "keyword_query", "kg", "fetch", "prompt", "total"]
    print("| bus | caller p50 | outer hop | " + " | ".join(order) + " |")
    print("|---|---|---|" + "---|" * len(order))
    with brokers.temporary_workdir() as workdir:  # the stores, the brokers' data and the processors' own dirs
        data_dir = str(workdir / "stores")
        os.environ.setdefault("RAGBUS_DATA_DIR", str(workdir / "processors"))
        await build_stores(data_dir, COLLECTION, DOCUMENTS)
        for backend in args.backends.split(","):
            broker = None if backend == "memory" else broker_for(backend, workdir).start()
            try:
                url = broker.url if broker else f"memory://hops-{uuid.uuid4().hex[:6]}"
                p50, stages = await measure(url, data_dir, args.queries)
            finally:
                if broker is not None:
                    broker.stop()
            cells = " | ".join(f"{stages.get(k, 0.0):.1f}" for k in order)
            print(f"| {backend} | {p50:.1f} | {p50 - stages.get('total', 0.0):.1f} | {cells} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
