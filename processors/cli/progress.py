"""The progress bar long commands (ingest, kg load, first use) draw on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable


def progress_bar(out=sys.stderr) -> Callable[[int, int, str], None]:
    def show(done: int, total: int, label: str) -> None:
        width = 30
        filled = width * done // max(total, 1)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:40]:<40}", end="", file=out, flush=True)
        if done == total:
            print(file=out)

    return show
