"""Ingestion against the raw embedder on exactly the same texts, finely alternated, before and after in one run.

    python -m scripts.bench_ingest                           # this checkout: 3 rounds of 8 slices
    python -m scripts.bench_ingest --before main             # main's tree beside this checkout
    python -m scripts.bench_ingest --rounds 5 --slices 12    # longer, steadier

What is compared, per tree (REV's from ``git archive``, and this checkout), in
one process of that tree with the model loaded before any clock starts:

- ingestion: what ``ragbus ingest`` with no path does: the default corpus (the 79
  topics first use ingests) sent to document-load on the embedded bus, chunked,
  embedded and written to every store, timed from the first document sent to
  the last one stored (the ``ingest`` call);
- raw embedder: the very same chunks (that tree's chunker and its settings),
  embedded by that tree's onnx backend directly (``embed_sync``) in the requests
  document-load sends (per document, ``embed_batch`` texts at a time): no bus, no
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
import os
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.ingestion import measure_ingestion
from scripts.bench.tables import print_comparison
from scripts.bench.trees import REPO, tree_of


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
    print_comparison(results, digits=3)


if __name__ == "__main__":
    main()
