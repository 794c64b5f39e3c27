"""Stores from the log: a query host's time to ready, its freshness and its memory, on Apache Kafka and Pulsar.

    python -m scripts.bench_log_replica --chunks 10000              # kafka, then pulsar
    python -m scripts.bench_log_replica --chunks 2000 --backends kafka
    python -m scripts.bench_log_replica --chunks 2000 --backends memory   # no broker: the replica's own cost

A generated collection (documents of ``--per-doc`` chunks of about 60 words, random unit vectors
of 384 dimensions) is written to the documents log through the writers' own path: the
doc-embeddings-store, doc-embeddings-delete and document-record processors with ``changelog =
true``, called in this process (no document-load or embedder: the ingest benchmarks measure those).
Then a documents-replica, in this process, on a data dir of its own:

- from empty: started on a new dir; the time until it has caught up (what ``ready`` waits for);
- from its checkpoint: stopped and started again on the same dir;
- freshness: ``--fresh`` more documents written one at a time while it follows; for each, from
  the write of its last record returning to the replica having applied it (p50, p99), and to the
  document being answerable: a doc-embeddings-query of the host (``changelog = true``, in the
  replica's process, as ``pipelines.LOG_REPLICA`` runs it) asked with the write's token in
  ``must_see`` and the document's first vector finds its first chunk (the query reloads the
  collection the replica published; its index is built once before the timing starts);
  then as many re-ingests (a new version of a document of the collection), until answerable;
- the first vector search after it: the query loads the collection and builds its faiss index
  (HNSW at or above ``hnsw_threshold``), and saves it; after the freshness runs, the first
  search of a restarted query, side by side: reading the index it saved, and building it
  (``index_cache = false``);
- memory: this process's peak resident set before and after the replica caught up, and its
  resident set then (the peak of a second backend's run starts at the first's); and, on a broker,
  a query host in a process of its own (a documents-replica and a doc-embeddings-query, as
  ``pipelines.LOG_REPLICA`` runs them, on a new data dir): its resident set once imported, once
  caught up from empty, and after its first vector search built the index, and its peak, with its
  time to ready (nothing shared with this process but the broker).

Printed with the CPU seconds of this process and of the broker during the catch-up from empty,
and the records per second. The machine is shared: read the ratios and the growth with size.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import resource
import tempfile
import time
import uuid
from pathlib import Path

from ragbus.config.settings import bus_settings
from ragbus.bus import connect
from ragbus.doc_embeddings import DocEmbeddingsQueryProcessor, DocEmbeddingsSettings
from ragbus.replica import DocumentsReplicaProcessor, ReplicaSettings
from ragbus.schema import DocEmbeddingsRequest
from ragbus.schema.changelog import parse_token
from ragbus.schema.topics import CHANGELOG_PREFIX
from scripts.bench.brokers import broker_env, broker_for
from scripts.bench.cpu import cpu_of
from scripts.bench.documents_log import Writers, request_context, rng_vectors
from scripts.bench.memory import status_mb
from scripts.bench.stats import percentile


def _pid(broker) -> int | None:
    return broker.process.pid if broker is not None and broker.process is not None else None


def _rss_mb() -> float:
    """This process's resident set now (the peak is the process's: a second backend's run starts at the first's)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def _host_alone(url: str, env: dict[str, str], log: str, collection: str, data_dir: str) -> dict[str, float]:
    figures = {"host process: RSS MB imported": status_mb("VmRSS")}
    async with await connect(url, bus_settings(environ=env)) as bus:
        replica, ready_s = await replica_ready(bus, log, Path(data_dir))
        figures |= {"host process: ready from empty s": ready_s,
                    "host process: RSS MB caught up": status_mb("VmRSS")}
        query = DocEmbeddingsQueryProcessor("bench-query", DocEmbeddingsSettings(
            data_dir=data_dir, changelog=True, log_topic=log, fresh_wait_s=60))
        query.bus = bus
        await query.start()
        await query.handle(DocEmbeddingsRequest(vectors=rng_vectors(random.Random(1), 1), collection=collection),
                           request_context())
        figures |= {"host process: RSS MB after first search": status_mb("VmRSS"),
                    "host process: peak RSS MB": status_mb("VmHWM")}
        await query.close()
        await replica.close()
    return figures


def _host_process(url: str, env: dict[str, str], log: str, collection: str, data_dir: str, out) -> None:
    out.put(asyncio.run(_host_alone(url, env, log, collection, data_dir)))


async def host_in_a_process(url: str, env: dict[str, str], log: str, collection: str,
                            data_dir: Path) -> dict[str, float]:
    """A query host's figures from a process of its own (spawned: it imports what a worker imports)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_host_process, args=(url, env, log, collection, str(data_dir), out))
    child.start()
    try:
        figures = await asyncio.to_thread(out.get, True, 900)
    finally:
        await asyncio.to_thread(child.join, 60)
        if child.is_alive():
            child.kill()
    return figures


async def replica_ready(bus, log: str, data_dir: Path, **settings) -> tuple[DocumentsReplicaProcessor, float]:
    replica = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(data_dir=str(data_dir), log_topic=log,
                                                                            **settings))
    replica.bus = bus
    started = time.perf_counter()
    await replica.start()
    return replica, time.perf_counter() - started


async def run(backend: str, chunks: int, per_doc: int, fresh: int, workdir: Path,
              unbatched: bool = False) -> dict[str, float]:
    # memory: no broker (the log is this process's), what the replica's own work costs.
    broker = None if backend == "memory" else broker_for(backend, workdir / f"{backend}-broker")
    if broker is not None:
        broker.start()
    try:
        url = f"memory://bench-{uuid.uuid4().hex[:6]}" if broker is None else broker.url
        async with await connect(url, bus_settings(environ=broker_env(broker))) as bus:
            log, collection = f"{CHANGELOG_PREFIX}bench-{uuid.uuid4().hex[:6]}", "bench"
            writers = Writers(bus, log)
            await writers.start()
            rng = random.Random(7)
            documents = chunks // per_doc
            slots = asyncio.Semaphore(8)

            async def one(i: int) -> None:
                async with slots:
                    await writers.document(collection, i, per_doc, rng)

            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(documents)))
            write_s = time.perf_counter() - t0
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            cpu0, broker0 = cpu_of(os.getpid()), cpu_of(_pid(broker))
            replica, empty_s = await replica_ready(bus, log, workdir / f"{backend}-host")
            cpu1, broker1 = cpu_of(os.getpid()), cpu_of(_pid(broker))
            rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rss_now = _rss_mb()
            records = replica.follower.read if replica.follower else 0
            alone_s = 0.0
            if unbatched:  # side by side: the same catch-up publishing after every record
                unbatched_replica, alone_s = await replica_ready(bus, log, workdir / f"{backend}-unbatched",
                                                                 batch_s=0)
                await unbatched_replica.close()
            # Freshness: a document written while the replica follows, until the replica applied it,
            # and until the host's query processor finds it.
            host = str(workdir / f"{backend}-host")

            async def first_search(index_cache: bool) -> tuple[DocEmbeddingsQueryProcessor, float]:
                query = DocEmbeddingsQueryProcessor("bench-query", DocEmbeddingsSettings(
                    data_dir=host, changelog=True, log_topic=log, fresh_wait_s=60, index_cache=index_cache))
                query.bus = bus
                await query.start()
                searched = time.perf_counter()  # the first search loads the collection and makes its index
                await query.handle(DocEmbeddingsRequest(vectors=rng_vectors(rng, 1), collection=collection),
                                   request_context())
                return query, time.perf_counter() - searched

            query, first_search_s = await first_search(index_cache=True)  # nothing saved yet: built (and saved)
            waits: list[float] = []
            answerable: list[float] = []
            reingested: list[float] = []
            for n, i in enumerate(range(documents, documents + 2 * fresh)):
                # New documents, then as many re-ingests of documents of the collection (a new version).
                document, edition = (i, 0) if n < fresh else (rng.randrange(documents), 1 + n)
                first: list = []
                (last,) = await writers.document(collection, document, per_doc, rng, edition=edition, written=first)
                written = time.perf_counter()
                assert replica.follower is not None
                assert await replica.follower.wait_for(parse_token(last)[1], 60)
                if n < fresh:
                    waits.append(time.perf_counter() - written)
                found = await query.handle(DocEmbeddingsRequest(vectors=first, collection=collection, limit=1,
                                                                must_see=[last]), request_context())
                (answerable if n < fresh else reingested).append(time.perf_counter() - written)
                assert [m.chunk_id for m in found.matches] == [f"doc-{document:06d}#0"], found
            closing = time.perf_counter()
            await query.close()  # saves what it added to the index: what a periodic save costs too
            save_s = time.perf_counter() - closing
            # A restarted query host's first search, side by side: reading the saved index, building it.
            restarts = {}
            for index_cache in (True, False):
                again_query, restarts[index_cache] = await first_search(index_cache)
                await again_query.close()
            await replica.close()
            again, checkpoint_s = await replica_ready(bus, log, workdir / f"{backend}-host")
            await again.close()
            alone = {} if broker is None else await host_in_a_process(broker.url, broker_env(broker), log, collection,
                                                                      workdir / f"{backend}-host-alone")
            await writers.close()
    finally:
        if broker is not None:
            broker.stop()
    return {
        "chunks": documents * per_doc, "records": records, "write s": write_s,
        "ready from empty s": empty_s, "records/s": records / empty_s if empty_s else 0.0,
        "ready from checkpoint s": checkpoint_s,
        "first vector search s": first_search_s,
        "restarted: first search s, saved index": restarts[True],
        "restarted: first search s, built": restarts[False],
        "index save s (at close)": save_s,
        **({"ready from empty s, no batches": alone_s,
            "  ratio (no batches / batched)": alone_s / empty_s if empty_s else 0.0} if unbatched else {}),
        "fresh p50 ms": percentile(waits, 50) * 1000, "fresh p99 ms": percentile(waits, 99) * 1000,
        "answerable p50 ms": percentile(answerable, 50) * 1000,
        "answerable p99 ms": percentile(answerable, 99) * 1000,
        "re-ingest answerable p50 ms": percentile(reingested, 50) * 1000,
        "re-ingest answerable p99 ms": percentile(reingested, 99) * 1000,
        "catch-up CPU s (this process)": cpu1 - cpu0, "catch-up CPU s (broker)": broker1 - broker0,
        "peak RSS MB before": rss_before, "peak RSS MB after": rss_after, "RSS MB after catch-up": rss_now,
        **alone,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--per-doc", type=int, default=20)
    parser.add_argument("--fresh", type=int, default=50, help="documents timed one at a time for freshness")
    parser.add_argument("--backends", default="kafka,pulsar")
    parser.add_argument("--unbatched", action="store_true",
                        help="also catch up with batch_s = 0 (a publish per record, as before batches), side by side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-log-replica-") as tmp:
        results = {b: asyncio.run(run(b, args.chunks, args.per_doc, args.fresh, Path(tmp), args.unbatched))
                   for b in args.backends.split(",")}
    names = list(dict.fromkeys(name for figures in results.values() for name in figures))
    print(f"{'':44}" + "".join(f"{b:>14}" for b in results))
    for name in names:
        print(f"{name:44}" + "".join(f"{results[b][name]:>14.1f}" if name in results[b] else f"{'':>14}"
                                     for b in results))


if __name__ == "__main__":
    main()
