"""Ingestion against the raw embedder on exactly the same texts, finely alternated, before and after in one run.

    python scripts/bench_ingest.py                           # this checkout: 3 rounds of 8 slices
    python scripts/bench_ingest.py --before main             # main's tree beside this checkout
    python scripts/bench_ingest.py --rounds 5 --slices 12    # longer, steadier

What is compared, per tree (REV's from ``git archive``, and this checkout), in
one process of that tree with the model loaded before any clock starts:

- ingestion: what ``ragbus ingest`` with no path does: the default corpus (the 79
  topics first use ingests) sent to document-load on the embedded bus, chunked,
  embedded and written to every store, timed from the first document sent to
  the last one stored (the ``ingest`` call);
- raw embedder: the very same chunks (that tree's chunker and its settings),
  embedded by that tree's onnx backend directly (``embed_sync``) in the requests
  the chunker sends (per document, ``embed_batch`` texts at a time): no bus, no
  stores, no other processor at work.

Each round ingests the whole corpus into a collection of its own (so a fresh
one, as on first use; nothing is "unchanged"), in ``--slices`` slices of the
topics; every slice is embedded raw and ingested back to back, the order
alternating from slice to slice. A slice takes seconds, so load from other
work on the machine (2 cores here, shared) falls on both sides alike instead
of on whichever ran during a busy minute. A round's rate on each side is its
chunks over the sum of its slices' seconds; the medians over rounds are
printed, with the load average of each round. Every slice starts ingestion
from an empty pipeline and ends it drained, so slicing counts against
ingestion, never for it. CPU seconds (all threads of the process) per chunk
are printed beside: they move less with the machine's load than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_footprint import REPO, environment, tree_of  # noqa: E402

# Run inside the measured tree. argv: rounds, slices. One JSON line per side of each slice.
BENCH = r"""
import asyncio, json, os, sys, time
from config import pipelines
from config.settings import load_settings
from processors.bus import connect
from processors.chunker.chunking import chunk_document
from processors.cli.common import command_client, embedded_processors
from processors.cli.documents import builtin_corpus
from processors.ingestion import ingest
from processors.embed.onnx_backend import OnnxBackend
from processors.runtime.worker import build_processor

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
from config.settings import load_settings
from processors.chunker.chunking import chunk_document
from processors.cli.documents import builtin_corpus
from processors.runtime.worker import build_processor

chunker = build_processor(load_settings(), "document-load").settings
print(sum(len(chunk_document(d, chunker.chunk_size, chunker.chunk_overlap)) for d in builtin_corpus("default")))
"""


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def corpus_chunks(tree: Path, env: dict[str, str]) -> int:
    """The chunks of the default corpus, as the tree's chunker splits it."""
    return int(_run([sys.executable, "-c", CHUNKS], env, tree))


def measure_ingestion(tree: Path, scratch: Path, name: str, rounds: int, slices: int = 8) -> dict[str, float]:
    """``rounds`` rounds of the raw embedder and ingestion in ``tree``, alternated slice by slice: the medians."""
    env = environment(tree, scratch / f"ingest-{name}")
    print(f"[{name}] ingestion against the raw embedder: {rounds} rounds of {slices} slices ...", file=sys.stderr,
          flush=True)
    lines = [json.loads(line) for line in _run([sys.executable, "-c", BENCH, str(rounds), str(slices)], env, tree)
             .splitlines() if line.startswith("{")]
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
                                for a, b in zip(got["ingestion"], got["raw"]))
        print(f"[{name}] round {r + 1}: {chunks['raw']} chunks; raw embedder {seconds['raw']:.1f}s = "
              f"{rate['raw']:.2f}/s ({cpu_ms['raw']:.0f} CPU ms/chunk), ingestion {seconds['ingestion']:.1f}s = "
              f"{rate['ingestion']:.2f}/s ({cpu_ms['ingestion']:.0f} CPU ms/chunk): ingestion / raw "
              f"{row['ingestion / raw embedder']:.3f} (slices: {slice_ratios}); load average "
              f"{min(loads):.2f}-{max(loads):.2f}", file=sys.stderr, flush=True)
    results = {key if key.startswith("chunks") else f"{key} (median)": statistics.median(values)
               for key, values in rows.items()}
    results["ingestion / raw embedder (lowest)"] = min(rows["ingestion / raw embedder"])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="a git revision to measure beside this checkout")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per tree, each the whole corpus (default 3)")
    parser.add_argument("--slices", type=int, default=8, help="slices of a round, alternated (default 8)")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", file=sys.stderr)
    started = time.perf_counter()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        scratch = Path(tmp)
        if args.before:
            results[f"before ({args.before})"] = measure_ingestion(tree_of(args.before, scratch), scratch,
                                                                   "before", args.rounds, args.slices)
        results["after (this checkout)"] = measure_ingestion(REPO, scratch, "after", args.rounds, args.slices)
    print(f"load average at end: {os.getloadavg()[0]:.2f}; {time.perf_counter() - started:.0f}s in all",
          file=sys.stderr)
    names = list(results)
    print(f"{'':38s}" + "".join(f"{n:>24s}" for n in names))
    for row in next(iter(results.values())):
        print(f"{row:38s}" + "".join(f"{results[n][row]:>24.3f}" for n in names))


if __name__ == "__main__":
    main()
