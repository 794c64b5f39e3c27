"""What ``ragbus`` prints when its reader goes away, and when a wait on the embedded bus was too short.

Each case runs the command as a user does, in a subprocess on the embedded bus. A reader that
closed the pipe (``ragbus ask ... | head``) used to get ``ragbus: error: [Errno 32] Broken pipe``
and exit status 2; a Unix tool ends quietly, and Python's note on SIGPIPE says with status 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Every subcommand that prints on stdout and runs on memory:// without a broker.
PRINTING = [
    ["ask", "When does the Osprey ferry leave Bergen?", "--mode", "keyword"],
    ["ask", "When does the Osprey ferry leave Bergen?", "--mode", "keyword", "--json"],
    ["documents"],
    ["documents", "--json"],
    ["collections"],
    ["kg", "query", "Osprey"],
    ["status"],
    ["dlq", "list"],
    ["--version"],
    ["--print-completion", "bash"],
]


def ragbus(*args: str, data: Path, stdout=subprocess.PIPE, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, env=dict(os.environ, RAGBUS_DATA_DIR=str(data), PYTHONPATH=str(REPO), **env),
                          cwd=REPO, timeout=300, check=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A data dir holding one document, so ``ask`` answers from it without a first use."""
    root = tmp_path_factory.mktemp("output")
    (root / "ferry.txt").write_text("The Osprey ferry leaves Bergen at seven every morning.")
    run = ragbus("ingest", str(root / "ferry.txt"), data=root / "data")
    assert run.returncode == 0, run.stderr
    return root / "data"


@pytest.mark.parametrize("args", PRINTING, ids=" ".join)
def test_a_closed_pipe_ends_the_command_quietly_with_status_1(data, args):
    printed = ragbus(*args, data=data)
    assert printed.returncode == 0 and printed.stdout, printed.stderr  # it does print: there is a write to fail
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line: every write meets a closed pipe
    try:
        closed = ragbus(*args, data=data, stdout=write)
    finally:
        os.close(write)
    assert closed.stderr == ""  # no "Broken pipe", no traceback, no "Exception ignored"
    assert closed.returncode == 1


def test_a_time_out_on_the_embedded_bus_says_it_was_too_short_naming_the_option(data):
    run = ragbus("ask", "When does the Osprey ferry leave Bergen?", "--timeout", "0.001", data=data)
    assert run.returncode == 2, run.stderr
    assert run.stderr == ("ragbus: error: no response on 'document-rag' within 0.001s: --timeout 0.001 was too "
                          "short for the work; on memory:// every processor runs in this process, so none is "
                          "missing (raise --timeout)\n")


def test_a_time_out_from_the_setting_names_the_setting(data):
    run = ragbus("ask", "When does the Osprey ferry leave Bergen?", data=data, RAGBUS_CLIENT__REQUEST_TIMEOUT_S="0.001")
    assert run.returncode == 2, run.stderr
    assert "[client] request_timeout_s = 0.001 (RAGBUS_CLIENT__REQUEST_TIMEOUT_S) was too short" in run.stderr
    assert "is a worker" not in run.stderr


def test_an_ingest_whose_store_time_out_was_too_short_says_so_for_the_document(data, tmp_path):
    (tmp_path / "bus.txt").write_text("The night bus runs every forty minutes.")
    run = ragbus("ingest", str(tmp_path / "bus.txt"), "--timeout", "0.001", data=data)
    assert run.returncode == 1, run.stderr
    assert (f"  failed: {tmp_path / 'bus.txt'}: no response on 'document-load' within 0.001s: --timeout 0.001 "
            "was too short for the work; on memory:// every processor runs in this process") in run.stderr
    assert "is a worker" not in run.stderr
