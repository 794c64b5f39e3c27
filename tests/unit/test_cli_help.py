"""``ragbus --help`` and every subcommand's help read as plain text, not docstring markup."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

from processors.cli.main import build_parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_ragbus_help_has_no_docstring_markup():
    # As a user runs it: the description once came from a docstring with ``ragbus`` in it.
    shown = subprocess.run([sys.executable, "-m", "processors.cli", "--help"], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    assert "usage: ragbus" in shown and "``" not in shown, shown


def test_no_subcommand_help_has_docstring_markup():
    parsers = list(_parsers(build_parser()))
    assert {p.prog for p in parsers} >= {"ragbus ask", "ragbus kg load", "ragbus record"}  # the walk reached them
    for parser in parsers:
        assert "``" not in parser.format_help(), parser.prog
