"""The project's dependencies with the given extras, one requirement a line, for the image's first layer:
``python dependencies.py pyproject.toml serve,documents``.

The layer installs them before the sources are copied in (so a change to the code rebuilds only the
layer after it), and the project itself cannot be built without its package folders. An extra that
names ragbus's own extras (``ragbus[serve]``) is expanded.
"""

from __future__ import annotations

import re
import sys
import tomllib


def requirements(project: dict, extras: list[str]) -> list[str]:
    found, todo, seen = list(project.get("dependencies", [])), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in project.get("optional-dependencies", {})[extra]:
            own = re.fullmatch(rf"{re.escape(project['name'])}\[([^\]]*)\]", requirement.replace(" ", ""))
            if own:
                todo.extend(e for e in own.group(1).split(",") if e)
            elif requirement not in found:
                found.append(requirement)
    return found


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        project = tomllib.load(f)["project"]
    print("\n".join(requirements(project, [e for e in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if e])))
