"""Ingest one large text file with ``ragbus ingest`` as a user would, then ask about its last page.

    python -m scripts.bench_large_document [--mb 20] [--max-tokens 256] [--keep DIR]

Writes a text file of about ``--mb`` MB (the Python language reference,
repeated, then a last page about a lighthouse keeper), runs ``ragbus ingest
FILE`` on the embedded bus (``memory://``, every ingestion processor in that
one process, default settings: 1 MB messages) in a fresh data directory, and
reports its wall time and peak RSS (``getrusage(RUSAGE_CHILDREN)``; the
ingesting process holds the faiss and tantivy stores too, so that RSS
includes them). Then ``ragbus ask`` is asked about the last page, and the
script checks that the answer cites a chunk from there.

``--max-tokens`` sets the embedder's window (``RAGBUS_PROCESSORS__EMBED__ONNX__MAX_TOKENS``):
256 is the real setting, and on 2 cores it embeds roughly 5-15 chunks of
1,000 characters a second, so 20 MB (~24k chunks) takes the better part of
an hour; 32 is ~10x faster and exercises the same path with poorer vectors.
Why it exists: before documents were sent in parts, any document over ~200 KB failed to ingest.
"""

from __future__ import annotations

import argparse
import json
import os
import pydoc_data.topics
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.paths import REPO as ROOT

LAST_PAGE = ("Appendix Z. The Skarvøy lighthouse was automated in 1987. Its last keeper, Ingrid Solvang, "
             "kept the lamp burning through the storm of 1979 and logged every passing ship by hand.")
QUESTION = "Who was the last keeper of the Skarvøy lighthouse?"


def write_file(path: Path, size: int) -> None:
    corpus = "\n\n".join(text for _, text in sorted(pydoc_data.topics.topics.items()))
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        while written + len(corpus) < size:
            f.write(corpus + "\n\n")
            written += len(corpus) + 2
        f.write(corpus[: max(0, size - written)] + "\n\n" + LAST_PAGE + "\n")


def ragbus(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "ragbus.cli", *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=None if args[0] == "ingest" else subprocess.PIPE, text=True)
    return run, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=20.0, help="size of the text file (default 20)")
    parser.add_argument("--max-tokens", type=int, default=256, help="the embedder's window (default 256, the real one)")
    parser.add_argument("--keep", help="use (and keep) this directory instead of a temporary one")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ragbus-large-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        text_file = work / "large.txt"
        write_file(text_file, int(args.mb * 1_000_000))
        env = dict(os.environ, RAGBUS_DATA_DIR=str(work / "data"), PYTHONPATH=str(ROOT),
                   RAGBUS_PROCESSORS__EMBED__ONNX__MAX_TOKENS=str(args.max_tokens))
        print(f"ingesting {text_file.stat().st_size / 1e6:.1f} MB, max_tokens={args.max_tokens}", file=sys.stderr)
        run, seconds = ragbus(["ingest", str(text_file)], env)
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"ingest: exit {run.returncode}, {seconds:.0f} s, peak RSS {peak_mb:.0f} MB")
        if run.returncode != 0:
            return 1
        asked, ask_seconds = ragbus(["ask", QUESTION, "--mode", "hybrid", "--json"], env)
        if asked.returncode != 0:
            print(asked.stderr, file=sys.stderr)
            return 1
        answer = json.loads(asked.stdout)
        cited = [c for c in answer["chunks"] if c["chunk_id"] in answer["cited"] and "Solvang" in c["text"]]
        print(f"ask: {ask_seconds:.0f} s, cited {answer['cited'][:3]}; "
              f"{'a chunk of the last page is cited' if cited else 'NO chunk of the last page is cited'}")
        return 0 if cited else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
