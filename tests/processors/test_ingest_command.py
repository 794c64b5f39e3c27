"""`ragbus ingest` and `ragbus delete` as a user runs them, on the embedded bus."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ragbus(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAGBUS_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "processors.cli", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )


def test_ingest_reports_progress_and_a_summary_then_delete_removes_the_document(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "one.md").write_text("# One\n\nThe walrus operator := assigns inside an expression.")
    (docs / "two.txt").write_text("Generators yield values lazily, one at a time.")
    (docs / "bad.txt").write_bytes(b"\xff\xfe not utf-8 \xe9")
    data = tmp_path / "data"
    run = ragbus("ingest", str(docs), data_dir=data)
    assert run.returncode == 1, run.stderr  # one file failed
    assert "2 document(s), 2 chunk(s)" in run.stderr and "1 failed" in run.stderr
    assert "not UTF-8" in run.stderr and "2/2" in run.stderr  # the progress bar reached the end
    assert (data / "default" / "faiss").is_dir() and (data / "default" / "tantivy").is_dir()
    gone = ragbus("delete", str((docs / "one.md").resolve()), data_dir=data)
    assert gone.returncode == 0, gone.stderr
    assert "removed 1 chunk(s)" in gone.stderr
