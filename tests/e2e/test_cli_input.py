"""A user's mistake on the command line: one line saying what is wrong, exit status 2, nothing started.

Each case runs ``ragbus`` as a user does, in a subprocess on the embedded bus. The
argument layer refuses the value before any processor starts or any store is
opened, so the data directory is never created, and no traceback is printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragbus.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]


def ragbus(*args: str, data_dir: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAGBUS_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "ragbus.cli", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout,
    )


CASES = [
    # empty or malformed values, refused with the argument named
    (["ask", ""], "argument question: the question is empty"),
    (["ask", "   "], "argument question: the question is empty"),
    (["ask", "Who?", "--at", "nonsense"], "argument --at: 'nonsense' is not an ISO 8601 date or datetime"),
    (["ask", "Who?", "--doc-limit", "-1"], "argument --doc-limit: must be an integer of at least 1, got '-1'"),
    (["kg", "query", "Germany", "--at", "yesterday"], "argument --at: 'yesterday' is not an ISO 8601"),
    # bounds that agree with what the processors accept
    (["ask", "Who?", "--doc-limit", "0"], "argument --doc-limit: must be an integer of at least 1, got '0'"),
    (["ingest", "--concurrency", "0"], "argument --concurrency: must be an integer of at least 1, got '0'"),
    (["ingest", "--concurrency", "many"], "argument --concurrency: must be an integer of at least 1, got 'many'"),
    (["ingest", "--timeout", "0"], "argument --timeout: must be a number of seconds above 0, got '0'"),
    (["delete", "x", "--timeout", "nan"], "argument --timeout: must be a number of seconds above 0, got 'nan'"),
    (["kg", "load", "--batch-size", "0"], "argument --batch-size: must be an integer of at least 1, got '0'"),
    (["kg", "query", "Germany", "--limit", "-1"], "argument --limit: must be an integer of at least 0, got '-1'"),
    (["kg", "query", "Germany", "--as-of", "2020-13-01"], "argument --as-of: '2020-13-01' is not an ISO 8601"),
    (["kg", "query", ""], "argument question: the question is empty"),
    (["ask", "Who?", "--timeout", "-5"], "argument --timeout: must be a number of seconds above 0, got '-5'"),
    (["ask", "Who?", "--collection", "../etc"], "argument --collection: invalid collection name '../etc'"),
    (["record", "embed", "-o", "x.jsonl", "--limit", "0"], "argument --limit: must be an integer of at least 1"),
    (["record", "embed", "-o", "x.jsonl", "--idle", "-1"], "argument --idle: must be a number of seconds above 0"),
    (["replay", "x.jsonl", "--speed", "0"], "argument --speed: must be a number above 0, got '0'"),
    (["ask", "Who?", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    # A byte that is not UTF-8 (``ragbus ask $'\xff'``) ended in Python's codec message, naming no argument.
    (["ask", b"\xff"], "argument question: is not UTF-8 text: byte 0xff at character 1 of b'\\xff'"),
    (["ask", b"Who is caf\xe9?"], "argument question: is not UTF-8 text: byte 0xe9 at character 11 of"),
    (["ask", "Who?", "--collection", b"caf\xe9"], "argument --collection: is not UTF-8 text: byte 0xe9"),
    (["ask", "Who?", "--bus", b"kafka://h\xf6st:9092"], "argument --bus: is not UTF-8 text: byte 0xf6"),
    (["ingest", b"notes-\xff.txt"], "argument paths: is not UTF-8 text: byte 0xff at character 7"),
    (["delete", b"\xfe"], "argument document: is not UTF-8 text: byte 0xfe"),
    (["kg", "query", b"Germ\xe4ny"], "argument question: is not UTF-8 text: byte 0xe4"),
    (["kg", "query", "Germany", "--at", b"2020\xff"], "argument --at: is not UTF-8 text: byte 0xff"),
    (["serve", "--host", b"l\xf6calhost"], "argument --host: is not UTF-8 text: byte 0xf6"),
    (["serve", "--port", b"80\xff"], "argument --port: is not UTF-8 text: byte 0xff"),
    (["status", "--processors", b"embed,\xff"], "argument --processors: is not UTF-8 text: byte 0xff"),
    (["brokers", b"k\xe4fka"], "argument which: is not UTF-8 text: byte 0xe4"),
]


def _shown(args: list[str | bytes]) -> str:
    return " ".join(a if isinstance(a, str) else repr(a) for a in args)


@pytest.mark.parametrize(("args", "says"), CASES, ids=[_shown(a) for a, _ in CASES])
def test_a_bad_argument_is_one_line_and_exit_status_2_before_anything_starts(tmp_path, args, says):
    data = tmp_path / "data"
    run = ragbus(*args, data_dir=data, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("ragbus: error: ") and says in lines[0], lines[0]
    assert run.stdout == ""
    assert not data.exists()  # refused before any processor or store was started


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_argument_of_every_subcommand_refuses_a_byte_that_is_not_utf8():
    """Python passes such a byte as a lone surrogate, which no message can carry: each argument says so."""
    checked = 0
    for parser in _parsers(build_parser()):
        for action in parser._actions:
            if action.nargs == 0 or isinstance(action, argparse._SubParsersAction):
                continue  # a flag, or the subcommand's name (refused by its choices)
            with pytest.raises(argparse.ArgumentTypeError, match="is not UTF-8 text: byte 0xff"):
                action.type("\udcff")
            checked += 1
    assert checked > 60  # every value-taking argument of every subcommand was looked at
