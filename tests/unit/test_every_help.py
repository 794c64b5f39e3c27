"""``--help`` of every script in scripts/ and of every ``ragbus`` subcommand prints its usage and exits 0.

argparse expands ``%`` in a help string (``%(default)s``), so a literal ``%`` once made a script's
``--help`` crash; a script that imports an optional extra at its top made it fail without the extra.
Every script is run as a user runs it (``python -m scripts.NAME --help``), found by its
``if __name__ == "__main__"``, so a new script is covered without a line here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragbus.cli.main import build_parser, main

REPO = Path(__file__).resolve().parents[2]


def _scripts() -> list[str]:
    found = []
    for path in sorted((REPO / "scripts").rglob("*.py")):
        if 'if __name__ == "__main__"' in path.read_text():
            found.append(".".join(path.relative_to(REPO).with_suffix("").parts))
    return found


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


SCRIPTS = _scripts()
COMMANDS = list(_commands(build_parser()))


def test_the_walks_reach_what_they_claim():
    assert {"scripts.bench_rag", "scripts.bench_peer", "scripts.chaos_log", "scripts.eval.evalset"} <= set(SCRIPTS)
    assert {(), ("ask",), ("dlq", "redrive"), ("kg", "load")} <= set(COMMANDS)


@pytest.mark.parametrize("module", SCRIPTS)
def test_a_scripts_help_prints_its_usage(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr[-2000:]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(("ragbus", *c)))
def test_a_ragbus_commands_help_prints_its_usage(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    shown = capsys.readouterr()
    assert exited.value.code == 0, shown.err
    assert shown.out.startswith(f"usage: {' '.join(('ragbus', *command))}"), shown.out[:200]
