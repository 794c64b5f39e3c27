"""Ctrl-C during `ragbus ingest` of a large document, as a user presses it: the command ends at once, says
what it kept and what it discarded, leaves no staged parts, and the document's earlier version still answers.

The embedded processors used to drain for ``drain_timeout_s`` (10 s) while document-load went on
embedding a part nobody would ask for again; the command then printed nothing and left the
part's staged chunks and vectors in the data dir until the next ingest.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..helpers.ingest_pipeline import large_text

REPO = Path(__file__).resolve().parents[2]
# The command's own bound on ending, well under the 10 s the drain took.
ENDS_WITHIN_S = 5
LARGE = {
    "RAGBUS_BUS__MAX_MESSAGE_BYTES": "200000",  # ~1.3 MB of text: parts of ~200 KB, each stored before the next
    "RAGBUS_PROCESSORS__EMBED__ONNX__MAX_TOKENS": "32",  # MiniLM on a short window: a part in about a second
    "RAGBUS_CLIENT__PROGRESS_INTERVAL_S": "0",  # stderr is a pipe: a line of progress for every part
}


def _env(data: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, RAGBUS_DATA_DIR=str(data), PYTHONPATH=str(REPO), **extra)


def ragbus(*args: str, data: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], capture_output=True, text=True,
                          env=_env(data), cwd=REPO, timeout=300, check=False)


async def test_ctrl_c_while_a_large_document_is_stored_ends_at_once_and_keeps_the_old_version(tmp_path):
    data, manual = tmp_path / "data", tmp_path / "manual.txt"
    manual.write_text("The Osprey ferry leaves Bergen at seven every morning.")
    first = ragbus("ingest", str(manual), data=data)
    assert first.returncode == 0, first.stderr
    (old,) = json.loads(ragbus("documents", "--json", data=data).stdout)

    manual.write_text(large_text(1_300_000))  # the new version: seven parts
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ragbus.cli", "ingest", str(manual), env=_env(data, **LARGE), cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    seen = []
    try:
        while "manual part 2 (" not in (seen or [""])[-1]:  # part 1 is stored: its chunks are staged
            line = (await asyncio.wait_for(proc.stderr.readline(), 300)).decode()
            assert line, "".join(seen)
            seen.append(line)
        assert any((data / "default" / "staged").rglob("*.msgpack"))  # something to clean up
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        took = time.monotonic() - interrupted
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    err = err.decode()
    assert took < ENDS_WITHIN_S, (took, err)
    assert proc.returncode == 130, err
    assert f"  interrupted: {manual}: not stored; its earlier version, if it had one, stays as queries saw it" in err
    assert ("interrupted: kept 0 document(s) stored before (0 chunk(s)); 1 interrupted, 0 not sent; "
            "their staged parts were discarded") in err, err
    assert "Traceback" not in err
    assert [p for p in (data / "default" / "staged").rglob("*") if p.is_file()] == []
    # The old version is still the one listed and answered.
    assert json.loads(ragbus("documents", "--json", data=data).stdout) == [old]
    answer = ragbus("ask", "When does the Osprey ferry leave Bergen?", "--mode", "keyword", data=data)
    assert answer.returncode == 0, answer.stderr
    assert f"leaves Bergen at seven every morning. [{manual.resolve()}#0]" in answer.stdout, answer.stdout
