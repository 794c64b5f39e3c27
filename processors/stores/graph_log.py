"""The graph's log: the append-only file a collection's graph is rebuilt from.

``LoadTriples`` frames of an ``AppendFile``, each what one batch changed (``GraphStore.apply``'s
``result.log``), fsynced before the writer replies. One writer, any number of readers; a reader
applies what was appended since its last look, and a record still being written waits for the next.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import msgspec

from ragbus.schema import LoadTriples
from ragbus.schema.times import iso

from .append_file import AppendFile
from .layout import graph_path

__all__ = ["Graph", "GraphLog", "graph_path", "stamped"]


class Graph(Protocol):
    """What a log is replayed into: kg's ``GraphStore``, named by its shape (the stores sit below kg)."""

    def apply(self, batch: LoadTriples, *, warn: bool = True) -> Any: ...


class GraphLog:
    """The ``AppendFile`` a collection's graph is rebuilt from; one writer, any number of readers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = AppendFile(path, LoadTriples)

    @property
    def offset(self) -> int:
        """Bytes of the file applied so far."""
        return self._file.offset

    def catch_up(self, store: Graph, on_progress: Callable[[int, int], None] | None = None) -> int:
        """Apply every complete record appended since the last call; returns how many.

        A record still being written (a short tail) is left for the next call.
        """
        applied = 0
        for batch in self._file.read_new():
            store.apply(batch, warn=False)
            applied += 1
            if on_progress is not None:
                on_progress(self._file.offset, self._file.size)
        return applied

    def open_for_append(self, store: Graph) -> None:
        """Replay the log, then cut a torn last record (a writer that died mid-append)."""
        self.catch_up(store)
        self._file.open_for_append()

    def append(self, batch: LoadTriples) -> None:
        self._file.append(batch)

    def close(self) -> None:
        self._file.close()


def stamped(batch: LoadTriples, now: datetime) -> LoadTriples:
    """The batch with ``recorded_at`` set on every fact (and on a retraction), as a producer dates its own.

    Applied, a fact under an id held with other content is a revision at ``now``, as it is when
    ``GraphStore.apply(batch, now=...)`` stamps it; two such facts under one id share that instant, so
    the second is refused either way.
    """
    stamp = iso(now)
    return msgspec.structs.replace(
        batch, facts=[f if f.recorded_at else msgspec.structs.replace(f, recorded_at=stamp) for f in batch.facts],
        recorded_at=batch.recorded_at or (stamp if batch.retract_sources else None),
    )
