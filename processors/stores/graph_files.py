"""``GraphFiles``: the graphs of a data dir's collections, each made from its graph log, on one thread.

A graph lives in memory and is rebuilt from its collection's ``GraphLog`` (``graph_log.py``): a
reader catches up with the file before each use; the writer (one per data dir: it holds the data
dir's ``kg`` writer lock from its start) replays it once, then appends what each batch changed.
The graph itself (``GraphStore``, kg's) is made by the ``new_graph`` it is given. Every call runs on
the one thread kept here: replaying a million facts takes seconds, and the graph needs no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from ragbus.runtime.threads import OneThread

from .graph_log import GraphLog, Graph
from .layout import graph_collections, graph_path
from .writer_lock import WriterLock, take_writer_lock

G = TypeVar("G", bound=Graph)
T = TypeVar("T")


class GraphFiles(Generic[G]):
    """The graphs opened so far, one per collection, with their logs, and the one thread that touches them."""

    def __init__(self, name: str, data_dir: Path, new_graph: Callable[[], G], *, writer: bool) -> None:
        self.data_dir = data_dir
        self.writer = writer
        self._new_graph = new_graph
        # Taken first: a writer that cannot have it starts nothing else.
        self.lock: WriterLock | None = take_writer_lock(data_dir, "kg", processor=name) if writer else None
        self.graphs: dict[str, tuple[G, GraphLog]] = {}
        self._thread = OneThread(name, closed_message="the graph store is closed")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._thread.run(fn, *args)

    async def close(self) -> None:
        try:
            if not self._thread.closed:
                await self._thread.run(self._close_logs)  # after a load already queued: applied and logged
            await self._thread.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _close_logs(self) -> None:
        for _, graph_log in self.graphs.values():
            graph_log.close()

    def existing(self) -> list[str]:
        return graph_collections(self.data_dir)

    def open(self, collection: str) -> tuple[G, GraphLog]:
        """The collection's graph, caught up with its log (on the thread)."""
        opened = self.graphs.get(collection)
        if opened is None:
            graph, graph_log = self._new_graph(), GraphLog(graph_path(self.data_dir, collection))
            if self.writer:
                graph_log.open_for_append(graph)
            opened = self.graphs[collection] = (graph, graph_log)
        if not self.writer:
            opened[1].catch_up(opened[0])
        return opened

    def forget(self, collection: str) -> None:
        """Drop the collection's graph (it may hold part of a batch its log does not): the next open
        rebuilds it from the log."""
        opened = self.graphs.pop(collection, None)
        if opened is not None:
            opened[1].close()
