"""A data dir removed or replaced under a running replica: noticed within a check, the replica fails.

A replica's stores and checkpoint live in its data dir. Removed under it (an operator's ``rm -rf``,
a volume unmounted), it would go on answering from open files and skip writes it can no longer
make, while reporting itself caught up. Instead the replica fails (``Processor.fail``): the worker
says why, stops being ready, drains and exits, and its supervisor starts it again on an empty dir,
which it rebuilds from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


class DataDirGone(RuntimeError):
    """The data dir (or a directory in it the replica keeps) is gone, or another one took its place."""


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class DataDirWatch:
    """Checks every ``interval_s`` that each of ``paths`` is still the directory it was at ``start``."""

    def __init__(self, name: str, paths: list[Path], on_gone: Callable[[BaseException], None], *,
                 interval_s: float) -> None:
        self.name, self.paths, self.on_gone, self.interval_s = name, paths, on_gone, interval_s
        self._identities: list[tuple[int, int] | None] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> DataDirWatch:
        self._identities = [_identity(p) for p in self.paths]
        self._task = asyncio.ensure_future(self._loop())
        return self

    def gone(self) -> Path | None:
        """The first watched directory that is no longer the one it was, if any."""
        for path, was in zip(self.paths, self._identities, strict=True):
            if _identity(path) != was:
                return path
        return None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            path = self.gone()
            if path is not None:
                error = DataDirGone(
                    f"{self.name}: {path} was removed or replaced while it ran, and its stores or checkpoint with "
                    f"it: the worker stops so that its supervisor starts it again, and it rebuilds from the log"
                )
                log.error("%s", error)
                self.on_gone(error)
                return

    async def close(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
