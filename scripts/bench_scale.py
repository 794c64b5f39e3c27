"""Do replicas scale? One and two worker processes of the query processors, side by side in one run.

    python -m scripts.bench_scale [--backends kafka pulsar] [--seconds 20] [--corpus small|full]

For each backend it starts a fresh test broker, fills a data dir with the
corpus and the sample graph (once), then for 1 and then 2 worker processes
(`ragbus worker <the query processors>`, one consumer group, so replicas split
each topic) runs two loads from this process for a fixed time:

- embed-bound: batches of 16 passages to `embed`, 2 batches in flight per worker process
  (more only queue behind the model, past the handler's time limit);
- hybrid query: `document-rag` questions in hybrid mode, 16 in flight.

Printed per row: requests/s, and the CPU spent in that window, split into
workers, broker and caller (this process), as cores used. "2 vs 1" is the
throughput ratio of the same load. The machine is shared: compare rows of
one run, not runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from ragbus.config import pipelines
from ragbus.config.settings import bus_settings
from ragbus.bus import connect
from ragbus.ingestion import builtin_corpus
from ragbus.testing.stores import build_stores
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient, EmbedClient
from ragbus.testing import brokers, selection
from ragbus.testing.chaos import WorkerProcess, worker_env
from scripts.bench.brokers import broker_for
from scripts.bench.cpu import cpu_of

QUESTIONS = [
    "What does the with statement do?", "How does nonlocal differ from global?", "What is __slots__ for?",
    "When does the else clause of a for loop run?", "How are exceptions raised and caught?",
    "What does yield do in a function?", "What is a lambda expression?", "Who was chancellor of Germany?",
]
EMBED_BATCH = 16


async def drive(call: Callable[[int], Awaitable[object]], in_flight: int, seconds: float) -> int:
    """Calls in a loop from ``in_flight`` tasks until ``seconds`` pass; returns how many finished."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def one(worker: int) -> None:
        nonlocal done
        i = worker
        while time.perf_counter() < deadline:
            await call(i)
            done += 1
            i += in_flight

    await asyncio.gather(*(one(w) for w in range(in_flight)))
    return done


async def measure(name, call, in_flight, seconds, workers: list[WorkerProcess], broker_pid) -> dict:
    await drive(call, in_flight, min(3.0, seconds / 4))  # warm up: models, connections, partitions
    pids = [w.pid for w in workers]
    w0, b0, c0, t0 = sum(map(cpu_of, pids)), cpu_of(broker_pid), time.process_time(), time.perf_counter()
    n = await drive(call, in_flight, seconds)
    wall = time.perf_counter() - t0
    return {"load": name, "rate": n / wall, "workers": (sum(map(cpu_of, pids)) - w0) / wall,
            "broker": (cpu_of(broker_pid) - b0) / wall, "caller": (time.process_time() - c0) / wall}


async def bench_backend(backend: str, workdir: Path, args) -> list[tuple[int, dict]]:
    rows: list[tuple[int, dict]] = []
    docs = builtin_corpus("default")
    passages = [d.text[:600] for d in docs] * 4
    with brokers.temporary_workdir() as broker_dir:
        broker = broker_for(backend, broker_dir).start()
        try:
            assert broker.process is not None
            settings = bus_settings(environ=selection.broker_env())
            for count in (1, 2):
                env = worker_env(str(workdir), uuid.uuid4().hex[:8])
                workers = list(await asyncio.gather(*(WorkerProcess(pipelines.QUERY, broker.url, env).start()
                                                      for _ in range(count))))
                try:
                    async with await connect(broker.url, settings) as bus, \
                            RequestClient(bus, name="scale", timeout_s=120) as client:
                        embed = EmbedClient(client, timeout=120)
                        rag = DocumentRagClient(client, timeout=120)

                        async def embed_call(i: int, embed: EmbedClient = embed) -> object:
                            start = (i * EMBED_BATCH) % (len(passages) - EMBED_BATCH)
                            return await embed.embed(passages[start:start + EMBED_BATCH])

                        async def ask_call(i: int, rag: DocumentRagClient = rag) -> object:
                            return await rag.ask(QUESTIONS[i % len(QUESTIONS)], mode="hybrid")

                        loads = (("embed-bound", embed_call, 2 * count), ("hybrid query", ask_call, 16))
                        for name, call, in_flight in loads:
                            r = await measure(name, call, in_flight, args.seconds, workers, broker.process.pid)
                            rows.append((count, r))
                            print(f"  {backend} {count} worker(s) {name}: {r['rate']:.1f}/s", file=sys.stderr)
                finally:
                    for w in workers:
                        await w.stop()
        finally:
            broker.stop()
    return rows


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", choices=["kafka", "pulsar"], default=["kafka", "pulsar"])
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring window per row")
    parser.add_argument("--corpus", choices=["small", "full"], default="full")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    workdir = Path(tempfile.mkdtemp(prefix="ragbus-bench-scale-"))
    docs = builtin_corpus("default")
    if args.corpus == "small":
        docs = docs[:10]
    print(f"ingesting {len(docs)} documents into {workdir}", file=sys.stderr)
    await build_stores(workdir, "default", docs)
    print(f"\n{os.cpu_count()} cores. CPU columns are cores used during the window.")
    print("| backend | load | workers | per s | 2 vs 1 | CPU workers | CPU broker | CPU caller |")
    print("|---|---|---|---|---|---|---|---|")
    for backend in args.backends:
        rows = await bench_backend(backend, workdir, args)
        one = {r["load"]: r["rate"] for c, r in rows if c == 1}
        for count, r in rows:
            ratio = f"{r['rate'] / one[r['load']]:.2f}x" if count == 2 else "-"
            print(f"| {backend} | {r['load']} | {count} | {r['rate']:.1f} | {ratio} | {r['workers']:.2f} "
                  f"| {r['broker']:.2f} | {r['caller']:.2f} |", flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
