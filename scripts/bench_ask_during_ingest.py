"""Questions while a bulk load runs: ask latency during ingestion against idle, side by side in one run.

    python -m scripts.bench_ask_during_ingest [--backends memory,kafka,pulsar] [--idle 30]
                                              [--documents 2] [--interval 0.2]

Per backend (``memory``: the embedded default, every processor in this process; ``kafka`` and
``pulsar``: the test brokers, with the query and ingestion processors as tasks of this process, as a
one-host deployment runs them): the default corpus and sample graph are ingested first (not timed),
then ``--idle`` questions are asked, one every ``--interval`` seconds, with nothing else running,
then ``--documents`` bulk documents (about 357 chunks each, the size of a long reference page)
are ingested one after another while questions keep being asked at that rate until the last
document is stored. A steady rate (not one question after another) samples every moment of the
load alike: asked one after another, the few questions stuck behind the load's batches would be
outnumbered by the many asked between them. Every ask is a hybrid question of the default corpus, answered whole.

Prints p50 and p99 of both phases, the ratio of the busy p50 to the idle p50, how long the bulk
load took, and the load average, since on 2 shared cores a busy machine moves every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pydoc_data.topics
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.ingestion import DocumentSource
from ragbus.cli.seed import first_use
from ragbus.ingestion import send_document
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.worker import processors_running
from ragbus.testing import selection
from ragbus.schema import Document
from scripts.bench.brokers import broker_for
from scripts.bench.stats import percentile

QUESTIONS = [
    "What does the with statement do?", "How are default argument values evaluated?",
    "What does the global statement do?", "How does a for loop iterate?", "What does yield do in a function?",
    "How is an exception raised?", "What does async def create?", "How do slicings work on sequences?",
    "What does del remove?", "How are class attributes looked up?", "What does the nonlocal statement do?",
    "How do comparisons chain?",
]
BULK_CHARS = 304_000  # about 357 chunks of 1,000 characters overlapping by 150


def bulk_text(n: int) -> str:
    """A long document of the reference's prose, different for every ``n`` (so none is "unchanged")."""
    corpus = "\n\n".join(text for _, text in sorted(pydoc_data.topics.topics.items()))
    start = (n * 97_003) % max(1, len(corpus) - BULK_CHARS)
    return f"Bulk document {n}.\n\n" + corpus[start : start + BULK_CHARS]


async def measure(settings, url: str, idle_asks: int, documents: int, interval: float) -> dict:
    async with processors_running(settings, list(pipelines.EVERYTHING), url, ready_timeout=300), \
            await connect(url, settings.bus) as bus, \
            RequestClient(bus, name="bench-ask") as asker, RequestClient(bus, name="bench-load") as loader:
        await first_use(loader, settings, "default")
        rag = DocumentRagClient(asker, timeout=300)

        async def ask(i: int) -> float:
            started = time.perf_counter()
            answer = await rag.ask(QUESTIONS[i % len(QUESTIONS)], mode="hybrid")
            if answer.error is not None:
                raise RuntimeError(f"ask failed: {answer.error}")
            return time.perf_counter() - started

        await ask(0)  # warm: every processor has answered once

        async def asked_every(interval: float, until) -> list[float]:
            """Questions at a steady rate (open loop), so every moment of the phase is sampled alike."""
            asks, i = [], 0
            while not until(i):
                asks.append(asyncio.ensure_future(ask(i)))
                i += 1
                await asyncio.sleep(interval)
            return list(await asyncio.gather(*asks))

        idle = await asked_every(interval, lambda i: i >= idle_asks)
        load_done = asyncio.Event()

        async def load() -> float:
            started = time.perf_counter()
            try:
                for n in range(documents):
                    doc = Document(document_id=f"bulk-{n}", text=bulk_text(n), title=f"bulk {n}")
                    await send_document(loader, DocumentSource.of(doc), timeout=600)
            finally:
                load_done.set()
            return time.perf_counter() - started

        loading = asyncio.ensure_future(load())
        busy = await asked_every(interval, lambda i: load_done.is_set())
        load_s = await loading
    return {"idle": idle, "busy": busy, "load_s": load_s}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="memory", help="comma-separated: memory, kafka, pulsar")
    parser.add_argument("--idle", type=int, default=30, help="questions asked with nothing else running")
    parser.add_argument("--documents", type=int, default=2, help="bulk documents ingested while asking")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between two questions (both phases)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ask-ingest-") as tmp:
        for n, backend in enumerate(args.backends.split(",")):
            os.environ["RAGBUS_DATA_DIR"] = str(Path(tmp) / f"data-{n}")
            broker = None
            if backend in ("kafka", "pulsar"):
                (Path(tmp) / f"broker-{n}").mkdir()
                broker = broker_for(backend, Path(tmp) / f"broker-{n}").start()
                settings = load_settings(environ=dict(os.environ, **selection.broker_env()))
                url = broker.url
            else:
                settings, url = load_settings(environ=dict(os.environ)), f"memory://bench-{n}"
            try:
                print(f"{backend}: seeding, then measuring", file=sys.stderr)
                r = await measure(settings, url, args.idle, args.documents, args.interval)
            finally:
                if broker is not None:
                    broker.stop()
            rows.append((backend, r, os.getloadavg()[0]))
    print("| backend | idle asks | idle p50 s | idle p99 s | asks during load | busy p50 s | busy p99 s "
          "| busy p50 / idle p50 | bulk load s | load average |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for backend, r, load in rows:
        idle, busy = r["idle"], r["busy"]
        print(f"| {backend} | {len(idle)} | {statistics.median(idle):.3f} | {percentile(idle, 99):.3f} | {len(busy)} "
              f"| {statistics.median(busy):.3f} | {percentile(busy, 99):.3f} "
              f"| {statistics.median(busy) / statistics.median(idle):.2f}x | {r['load_s']:.1f} | {load:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
