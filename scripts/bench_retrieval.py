"""Benchmark ingestion and retrieval through the real processors, on the in-process bus.

    python -m scripts.bench_retrieval [--quick]

1. Ingestion: the builtin corpus (the Python language reference from
   ``pydoc_data.topics``; --quick: its first 15 documents) sent to
   ``document-load`` on a ``memory://`` bus, every processor running in this
   process against a fresh temporary data dir: chunk -> embed (ONNX MiniLM)
   -> faiss and tantivy stores. Reported: documents, chunks, seconds, chunks/s,
   and each processor's summed handler time, which shows what the time goes to.
2. Query latency at 10k and 100k chunks (--quick: 10k only). The stores are
   built directly through ``VectorStore`` and ``KeywordIndex`` from synthetic
   data (no embedding model at this scale): text drawn from a seeded RNG over
   a Zipf-weighted vocabulary with identifier-like tokens mixed in, and seeded
   random unit 384-d float32 vectors. Then the query processors run in-process
   against that data dir and queries go through the bus, one at a time, via
   ``KeywordClient.query`` / ``DocEmbeddingsClient.query`` with limit=10.
   The first query of each store is reported apart: it opens the store, and
   for faiss builds the index (HNSW at or above ``hnsw_threshold``).

Everything lives in temporary directories, removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.ingestion import builtin_corpus
from ragbus.stores.vectors.store import VectorStore
from ragbus.stores.layout import vectors_dir
from ragbus.embed.onnx_backend import OnnxBackend
from ragbus.ingestion import ingest
from ragbus.stores.keywords.index import KeywordIndex
from ragbus.stores.keywords.indexes import KeywordWriter
from ragbus.stores.vectors.collections import VectorCollections
from ragbus.stores.keywords.settings import KeywordSettings
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocEmbeddingsClient, KeywordClient
from ragbus.runtime.worker import processors_running
from ragbus.schema import DEFAULT_COLLECTION, Chunk
from scripts.bench.stats import percentile

DIMENSION = 384
SEED = 20240601
WORDS_PER_CHUNK = (60, 140)  # about 400-1000 characters, like document-load's default chunk_size of 1000
IDENT_SHARE = 0.03  # share of a chunk's tokens that are identifier-like


@contextlib.asynccontextmanager
async def running(names: Sequence[str], data_dir: Path):
    """``names`` running in this process on a fresh memory:// bus over ``data_dir``; yields a RequestClient."""
    os.environ["RAGBUS_DATA_DIR"] = str(data_dir)  # default_data_dir() of every store processor
    settings = load_settings(environ={})
    url = f"memory://bench-{uuid.uuid4().hex[:8]}"
    try:
        async with (
            processors_running(settings, names, url),
            await connect(url) as bus,
            RequestClient(bus, name="bench") as client,
        ):
            yield client
    finally:
        drop_memory_broker(url.removeprefix("memory://"))


BUSY: dict[str, float] = {}  # seconds spent in the wrapped blocking calls below, by label


def time_calls(owner, attribute: str, label: str) -> None:
    """Wrap ``owner.attribute`` (a blocking function) to add its wall time to ``BUSY[label]``."""
    original = getattr(owner, attribute)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            BUSY[label] = BUSY.get(label, 0.0) + time.perf_counter() - started

    setattr(owner, attribute, wrapper)


# Each runs on its processor's single worker thread, so a sum is that thread's busy time.
time_calls(OnnxBackend, "embed_sync", "embed (tokenize + ONNX MiniLM)")
time_calls(VectorCollections, "upsert", "faiss store (upsert + write files)")
time_calls(KeywordWriter, "upsert", "tantivy store (upsert + commit)")


async def bench_ingest(quick: bool, tmp: Path) -> None:
    documents = builtin_corpus(DEFAULT_COLLECTION)
    if quick:
        documents = documents[:15]
    data_dir = tmp / "ingest"
    data_dir.mkdir()
    async with running(pipelines.INGEST, data_dir) as client:
        BUSY.clear()
        summary = await ingest(client, documents, timeout=300)
        busy = dict(BUSY)
    if summary.failed:
        raise RuntimeError(f"ingestion failed for {len(summary.failed)} documents: {summary.failed[:3]}")
    print("\n## Ingestion, end to end through the bus (memory://, all processors in this process)\n")
    print(f"{'documents':>9} {'chunks':>7} {'seconds':>8} {'chunks/s':>9} {'docs/s':>7}")
    print(f"{summary.documents:>9} {summary.chunks:>7} {summary.seconds:>8.1f} "
          f"{summary.chunks / summary.seconds:>9.1f} {summary.documents / summary.seconds:>7.2f}")
    print("\nBusy time of each processor's worker thread during ingestion (4 documents in flight):")
    for label, spent in busy.items():
        print(f"  {label:<36} {spent:>7.1f} s  ({100 * spent / summary.seconds:>5.1f}% of wall time)")
    top = max(busy, key=lambda label: busy[label])
    print(f"Dominant: {top}. Threads overlap (the stores write one document while the next is embedded).")
    shutil.rmtree(data_dir, ignore_errors=True)


def vocabulary(rng: np.random.Generator) -> tuple[list[str], np.ndarray, list[str]]:
    """Pseudo-words with Zipf weights, and identifier-like tokens (dotted paths, codes, dunders, sections)."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = sorted({"".join(rng.choice(letters, size=rng.integers(3, 11))) for _ in range(20_000)})
    rng.shuffle(words)
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    idents: list[str] = []
    for _ in range(3_000):
        a, b, c = (words[i] for i in rng.integers(0, 2_000, size=3))
        kind = rng.integers(0, 5)
        idents.append([f"{a}.{b}.{c}", f"E{rng.integers(1000, 9999)}", f"__{a}__",
                       f"{rng.integers(1, 20)}.{rng.integers(1, 20)}.{rng.integers(1, 9)}", f"{a}_{b}"][kind])
    return words, weights / weights.sum(), idents


def synthetic_chunks(n: int, rng: np.random.Generator, vocab) -> list[Chunk]:
    words, weights, idents = vocab
    lengths = rng.integers(*WORDS_PER_CHUNK, size=n)
    tokens = rng.choice(len(words), size=int(lengths.sum()), p=weights)
    is_ident = rng.random(tokens.size) < IDENT_SHARE
    ident_of = rng.integers(0, len(idents), size=tokens.size)
    words_arr = np.array(words, dtype=object)
    idents_arr = np.array(idents, dtype=object)
    texts = np.where(is_ident, idents_arr[ident_of], words_arr[tokens])
    chunks, start = [], 0
    for i, length in enumerate(lengths.tolist()):
        doc = i // 20  # 20 chunks a document
        chunks.append(Chunk(chunk_id=f"syn{doc:06d}-{i % 20:02d}", document_id=f"syn{doc:06d}",
                            text=" ".join(texts[start:start + length]), position=i % 20,
                            title=f"{words[doc % 500]} {doc}"))
        start += length
    return chunks


def unit_vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal((n, DIMENSION), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def keyword_queries(n: int, rng: np.random.Generator, vocab) -> list[str]:
    words, weights, idents = vocab
    queries = []
    for _ in range(n):
        q = [words[i] for i in rng.choice(len(words), size=rng.integers(2, 7), p=weights)]
        if rng.random() < 0.3:
            q.insert(int(rng.integers(0, len(q) + 1)), idents[rng.integers(0, len(idents))])
        queries.append(" ".join(q))
    return queries


def build_stores(n: int, data_dir: Path, rng: np.random.Generator, vocab) -> dict[str, float]:
    times = {}
    started = time.perf_counter()
    chunks = synthetic_chunks(n, rng, vocab)
    vectors = unit_vectors(n, rng)
    times["generate"] = time.perf_counter() - started

    started = time.perf_counter()
    store = VectorStore(vectors_dir(data_dir, DEFAULT_COLLECTION), DEFAULT_COLLECTION, readonly=False)
    store.upsert(chunks, vectors)  # one write of the matrix and metadata; the index is built by readers
    times["faiss"] = time.perf_counter() - started

    started = time.perf_counter()
    index = KeywordIndex.open_writer(data_dir, DEFAULT_COLLECTION, KeywordSettings())
    for i in range(0, n, 10_000):  # what keyword-store does: upsert a batch, commit
        index.upsert(chunks[i:i + 10_000])
        index.commit()
    index.close()
    times["tantivy"] = time.perf_counter() - started
    return times


async def timed(call, inputs) -> list[float]:
    out = []
    for item in inputs:
        started = time.perf_counter()
        matches = await call(item)
        out.append(time.perf_counter() - started)
        if len(matches) != 10:
            raise RuntimeError(f"expected 10 matches, got {len(matches)}")
    return out


async def bench_queries(n: int, n_queries: int, tmp: Path, vocab) -> list[tuple]:
    data_dir = tmp / f"stores-{n}"
    data_dir.mkdir()
    rng = np.random.default_rng(SEED + n)
    built = build_stores(n, data_dir, rng, vocab)
    print(f"  {n:>7} chunks: generated in {built['generate']:.1f} s; built faiss store in {built['faiss']:.1f} s, "
          f"tantivy index in {built['tantivy']:.1f} s", flush=True)
    kinds = VectorStore(vectors_dir(data_dir, DEFAULT_COLLECTION), DEFAULT_COLLECTION, readonly=True)
    kind = kinds.index_kind
    threshold = kinds.hnsw_threshold
    del kinds
    texts = keyword_queries(n_queries + 1, rng, vocab)
    vectors = unit_vectors(n_queries + 1, rng)
    rows = []
    async with running(pipelines.RETRIEVAL, data_dir) as client:
        keyword = KeywordClient(client, timeout=300)
        vector = DocEmbeddingsClient(client, timeout=300)
        # (store, one search, its inputs, seconds to build it, its index)
        cases: list[tuple[str, Callable[[Any], Awaitable[Any]], Any, float, str]] = [
            ("tantivy", lambda q: keyword.query(query=q, limit=10), texts, built["tantivy"], "BM25"),
            ("faiss", lambda v: vector.query([v.tolist()], limit=10), vectors, built["faiss"],
             f"{'IndexHNSWFlat' if kind == 'hnsw' else 'IndexFlatIP'} ({kind}, threshold {threshold:,})"),
        ]
        for name, call, inputs, build, index_type in cases:
            first = await timed(call, inputs[:1])  # opens the store; faiss builds its index here
            samples = await timed(call, inputs[1:])
            rows.append((name, n, index_type, build, first[0] * 1000, percentile(samples, 50) * 1000,
                         percentile(samples, 99) * 1000, len(samples)))
    shutil.rmtree(data_dir, ignore_errors=True)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="15 documents, 10k chunks only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sizes = [10_000] if args.quick else [10_000, 100_000]
    n_queries = 300
    print(f"# ragbus retrieval benchmark{' (--quick)' if args.quick else ''}: os.cpu_count() = {os.cpu_count()}, "
          f"Python {sys.version.split()[0]}")
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="ragbus-bench-"))
    previous = os.environ.get("RAGBUS_DATA_DIR")
    try:
        await bench_ingest(args.quick, tmp)
        print("\n## Query latency through the bus (memory://, query processors in this process, limit=10, "
              f"one query in flight, {n_queries} queries after a first one)\n")
        print("Building synthetic stores (seeded; Zipf vocabulary with identifier-like tokens, "
              f"random unit {DIMENSION}-d float32 vectors):")
        vocab = vocabulary(np.random.default_rng(SEED))
        rows = []
        for n in sizes:
            rows += await bench_queries(n, n_queries, tmp, vocab)
        print()
        header = f"{'store':<8} {'chunks':>8} {'index':<40} {'build s':>8} {'first ms':>9} {'p50 ms':>7} {'p99 ms':>7}"
        print(header)
        print("-" * len(header))
        for name, n, index_type, build, first, p50, p99, _count in rows:
            print(f"{name:<8} {n:>8,} {index_type:<40} {build:>8.2f} {first:>9.1f} {p50:>7.2f} {p99:>7.2f}")
        print("\nbuild s: writing the store through its class (faiss: matrix + metadata files, one upsert; "
              "tantivy: upsert + commit per 10k).\nfirst ms: the first query, which opens the store "
              "(faiss: loads the files and builds the index). Keyword queries: 2-6 Zipf-drawn words, 30% "
              "with an identifier;\nvector queries: random unit vectors.")
    finally:
        if previous is None:
            os.environ.pop("RAGBUS_DATA_DIR", None)
        else:
            os.environ["RAGBUS_DATA_DIR"] = previous
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\ntotal run time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
