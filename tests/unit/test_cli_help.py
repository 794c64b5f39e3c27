"""``ragbus --help`` and every subcommand's help read as plain text, not docstring markup."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragbus.cli.main import build_parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_ragbus_help_has_no_docstring_markup():
    # As a user runs it: the description once came from a docstring with ``ragbus`` in it.
    shown = subprocess.run([sys.executable, "-m", "ragbus.cli", "--help"], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    assert "usage: ragbus" in shown and "``" not in shown, shown


def test_no_subcommand_help_has_docstring_markup():
    parsers = list(_parsers(build_parser()))
    assert {p.prog for p in parsers} >= {"ragbus ask", "ragbus kg load", "ragbus record"}  # the walk reached them
    for parser in parsers:
        assert "``" not in parser.format_help(), parser.prog


REPO = Path(__file__).resolve().parents[2]


def _ragbus(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ragbus.cli", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=60)


def test_bare_ragbus_prints_help_and_runs_nothing(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), RAGBUS_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, "-m", "ragbus.cli"], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ragbus") and "{check,worker," in done.stdout and "ask" in done.stdout
    assert done.stderr == ""  # no self-check ran: it reports on stderr
    assert not (tmp_path / "data").exists()


def test_version_is_the_installed_distributions():
    done = _ragbus("--version")
    assert done.returncode == 0, done.stderr
    try:
        expected = importlib.metadata.version("ragbus")
    except importlib.metadata.PackageNotFoundError:
        expected = "unknown (not installed)"
    assert done.stdout == f"ragbus {expected}\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_bash_completion_script_completes_subcommands_and_choices(tmp_path):
    done = _ragbus("--print-completion", "bash")
    assert done.returncode == 0, done.stderr
    script = tmp_path / "ragbus.bash"
    script.write_text(done.stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        shown = subprocess.run(
            ["bash", "-c", f'source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _shtab_ragbus; '
                           'printf "%s\\n" "${COMPREPLY[@]}"'],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout
        return sorted(shown.split())

    assert complete("ragbus", "k") == ["kg"]
    assert complete("ragbus", "kg", "") == ["load", "query"]
    assert complete("ragbus", "ask", "--mode", "h") == ["hybrid"]


def test_the_cli_on_the_memory_bus_loads_no_broker_client(tmp_path):
    """The embedded default pays for no Kafka or Pulsar client: aiokafka alone is about 15 MiB resident.

    ``ragbus check`` on memory:// runs a worker, a dead-letter path and the settings, in a fresh
    interpreter; which broker client modules it imported says what a ``ragbus ask`` would carry.
    """
    probe = (
        "import sys\n"
        "from ragbus.cli.main import main\n"
        "assert main(['check', '--bus', 'memory://probe']) == 0\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiokafka', 'kafka', 'pulsar', '_pulsar'}))\n"
    )
    env = {**os.environ, "RAGBUS_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
