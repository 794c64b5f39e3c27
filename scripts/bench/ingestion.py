"""Ingestion against the raw embedder on the same texts, alternated slice by slice, in one tree.

Shared by ``scripts.bench_ingest`` (this alone, before and after) and ``scripts.bench_footprint``
(this beside first use). The measuring code runs inside the measured tree's own process, as a
``python -c`` program, so each tree is timed with its own chunker, embedder and bus.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from scripts.bench.trees import environment, in_tree, run_checked

# Run inside the measured tree. argv: rounds, slices. One JSON line per side of each slice.
BENCH = r"""
import asyncio, json, os, sys, time
from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.document_load.chunking import chunk_document
from ragbus.cli.common import command_client, embedded_processors
from ragbus.ingestion import builtin_corpus
from ragbus.ingestion import ingest
from ragbus.embed.onnx_backend import OnnxBackend
from ragbus.runtime.worker import build_processor

rounds, slices = int(sys.argv[1]), int(sys.argv[2])


def embed_all(backend, requests):
    for texts in requests:
        backend.embed_sync(texts)


async def main():
    settings = load_settings()
    chunker = build_processor(settings, "document-load").settings
    url = settings.bus.url
    assert url.startswith("memory"), url
    backend = OnnxBackend(build_processor(settings, "embed").settings.onnx)
    backend.load()  # the raw side's model; the embed processor loads its own (the same file) as it starts
    async with embedded_processors(settings, pipelines.INGEST, url):
        async with await connect(url, settings.bus) as bus, command_client(bus, settings, "bench") as client:
            for r in range(rounds):
                corpus = builtin_corpus(f"bench-{r}")
                for k in range(slices):
                    docs = corpus[k::slices]
                    requests = []
                    for doc in docs:
                        texts = [c.text for c in chunk_document(doc, chunker.chunk_size, chunker.chunk_overlap)]
                        step = chunker.embed_batch
                        requests += [texts[i:i + step] for i in range(0, len(texts), step)]
                    sides = ("raw", "ingestion") if (r * slices + k) % 2 == 0 else ("ingestion", "raw")
                    for side in sides:
                        wall, cpu = time.perf_counter(), time.process_time()
                        if side == "raw":
                            await asyncio.to_thread(embed_all, backend, requests)
                            chunks = sum(map(len, requests))
                        else:
                            summary = await ingest(client, docs, timeout=settings.client.store_timeout_s)
                            assert not summary.failed and not summary.unchanged, (summary.failed, summary.unchanged)
                            chunks = summary.chunks
                        print(json.dumps({"round": r, "slice": k, "side": side, "chunks": chunks,
                                          "seconds": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                                          "load": os.getloadavg()[0]}), flush=True)

asyncio.run(main())
"""

# Run inside the measured tree: how many chunks its chunker makes of the default corpus.
CHUNKS = r"""
from ragbus.config.settings import load_settings
from ragbus.document_load.chunking import chunk_document
from ragbus.ingestion import builtin_corpus
from ragbus.runtime.worker import build_processor

chunker = build_processor(load_settings(), "document-load").settings
print(sum(len(chunk_document(d, chunker.chunk_size, chunker.chunk_overlap)) for d in builtin_corpus("default")))
"""


def corpus_chunks(tree: Path, env: dict[str, str]) -> int:
    """The chunks of the default corpus, as the tree's chunker splits it."""
    return int(run_checked([sys.executable, "-c", in_tree(CHUNKS, tree)], env, tree))


def measure_ingestion(tree: Path, scratch: Path, name: str, rounds: int, slices: int = 8) -> dict[str, float]:
    """``rounds`` rounds of the raw embedder and ingestion in ``tree``, alternated slice by slice: the medians."""
    env = environment(tree, scratch / f"ingest-{name}")
    print(f"[{name}] ingestion against the raw embedder: {rounds} rounds of {slices} slices ...", file=sys.stderr,
          flush=True)
    out = run_checked([sys.executable, "-c", in_tree(BENCH, tree), str(rounds), str(slices)], env, tree)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    rows: dict[str, list[float]] = {}
    for r in range(rounds):
        got = {side: [x for x in lines if x["round"] == r and x["side"] == side] for side in ("raw", "ingestion")}
        chunks = {side: sum(x["chunks"] for x in got[side]) for side in got}
        if chunks["raw"] != chunks["ingestion"]:
            raise SystemExit(f"[{name}] the raw embedder embedded {chunks['raw']} chunks, ingestion stored "
                             f"{chunks['ingestion']}: not the same texts")
        seconds = {side: sum(x["seconds"] for x in got[side]) for side in got}
        cpu_ms = {side: 1000 * sum(x["cpu"] for x in got[side]) / chunks[side] for side in got}
        rate = {side: chunks[side] / seconds[side] for side in got}
        loads = [x["load"] for x in got["raw"] + got["ingestion"]]
        row = {
            "chunks (each side)": chunks["raw"],
            "raw embedder: chunks/s": rate["raw"],
            "ingestion: chunks/s": rate["ingestion"],
            "ingestion / raw embedder": rate["ingestion"] / rate["raw"],
            "raw embedder: CPU ms/chunk": cpu_ms["raw"],
            "ingestion: CPU ms/chunk": cpu_ms["ingestion"],
            "raw CPU / ingestion CPU": cpu_ms["raw"] / cpu_ms["ingestion"],
        }
        for key, value in row.items():
            rows.setdefault(key, []).append(value)
        slice_ratios = " ".join(f"{a['chunks'] / a['seconds'] / (b['chunks'] / b['seconds']):.2f}"
                                for a, b in zip(got["ingestion"], got["raw"], strict=True))
        print(f"[{name}] round {r + 1}: {chunks['raw']} chunks; raw embedder {seconds['raw']:.1f}s = "
              f"{rate['raw']:.2f}/s ({cpu_ms['raw']:.0f} CPU ms/chunk), ingestion {seconds['ingestion']:.1f}s = "
              f"{rate['ingestion']:.2f}/s ({cpu_ms['ingestion']:.0f} CPU ms/chunk): ingestion / raw "
              f"{row['ingestion / raw embedder']:.3f} (slices: {slice_ratios}); load average "
              f"{min(loads):.2f}-{max(loads):.2f}", file=sys.stderr, flush=True)
    results = {key if key.startswith("chunks") else f"{key} (median)": statistics.median(values)
               for key, values in rows.items()}
    results["ingestion / raw embedder (lowest)"] = min(rows["ingestion / raw embedder"])
    return results
