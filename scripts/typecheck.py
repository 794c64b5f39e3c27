"""mypy over the ragbus package, as it is installed: ``python -m scripts.typecheck [mypy options]``.

The folders processors/, schema/ and config/ are installed as ragbus, ragbus.schema and ragbus.config
(pyproject.toml ``package-dir``). An editable install maps the names with an import hook, which mypy
cannot follow (it reads folders), so this lays the same tree out as links under build/typecheck/ragbus
(each entry of processors/, then schema and config), runs mypy on it with pyproject.toml's settings, and
prints the findings with the repository's own paths. Exit status: mypy's.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
# Where each folder sits in the installed package (pyproject.toml [tool.setuptools] package-dir).
PLACES = {"schema": "ragbus/schema", "config": "ragbus/config", "processors": "ragbus"}


def lay_out() -> Path:
    """build/typecheck/ragbus: a link per entry of processors/, and schema/ and config/ beside them."""
    package = TREE / "ragbus"
    shutil.rmtree(TREE, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (ROOT / "processors").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder in ("schema", "config"):
        (package / folder).symlink_to(ROOT / folder)
    return package


def repo_path(line: str) -> str:
    """A finding's path in the tree, as the repository's path."""
    tree = str(TREE.relative_to(ROOT)) + "/"
    if not line.startswith(tree):
        return line
    rest = line[len(tree):]
    for folder, place in PLACES.items():
        if rest.startswith(place + "/"):
            return folder + "/" + rest[len(place) + 1:]
    return line


def main(argv: list[str]) -> int:
    from mypy import api

    lay_out()
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *argv])
    sys.stdout.write("".join(repo_path(line) + "\n" for line in out.splitlines()))
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
