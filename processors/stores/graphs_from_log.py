"""The graphs made from the graph's log topic: any number of writers append, every replica applies.

With ``[processors.kg-*] changelog = true`` the graph of every collection lives on the bus, in
``ragbus.schema.topics.GRAPH_LOG`` (``log_topic``), instead of ``<data_dir>/<collection>/graph/log``:

- kg-store (any number of replicas, on any host) stamps each batch (``stamped``: every fact
  and retraction gets its ``recorded_at`` now, so applying it anywhere gives the same graph),
  checks its ontology, appends it, and replies once its own copy of the graph has applied the
  batch, with what applying it did (added, unchanged, rejected, retracted).
- kg-query (any number of replicas, on any host, each with a data dir of its own) applies
  every record in log order, and answers from its own graphs.

Records are the stamped batches. Each has a key of its own (the collection and a change id),
so Kafka's compaction keeps every one: the graph is bitemporal, its history is its state (a
retracted fact is still what was known before, for ``as_of``), and nothing in it is ever
superseded. They share the collection as their order key, so a collection's batches are
applied in the order they were appended on every replica.

Each replica keeps a local copy of the records (``snapshots.py``) in
``<data_dir>/.replicas/<processor>/graph.log``, replays it at start and reads the log from
where it ends; it reports ready once caught up with the log. The graph itself (kg's ``GraphStore``)
and the check of a batch before it is logged (its ontology) are the caller's, handed in.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from ragbus.bus import LogRecord, LogTopics
from ragbus.runtime.threads import OneThread
from ragbus.schema import IngestResult, LoadTriples, check_collection
from ragbus.schema.changelog import token

from .follower import LogFollower
from .graph_log import Graph, stamped
from .layout import replica_dir
from .reports import ReportLoop, replica_id
from .seen import register_follower, unregister_follower
from .snapshots import LocalCopy

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Graph(Graph, Protocol):
    """A graph that says how many fact versions it holds (for the log at start)."""

    def __len__(self) -> int: ...


G = TypeVar("G", bound=_Graph)

CHANGE = "ragbus-change"  # header: the id of the change a record carries, for the writer that waits on it

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(LoadTriples).decode


def copy_path(data_dir: Path, processor: str) -> Path:
    return replica_dir(data_dir, processor) / "graph.log"


async def append_batch(bus: LogTopics, topic: str, batch: LoadTriples, change: str) -> str:
    """Append one stamped batch to the graph's log, as change ``change`` (a key of its own, the collection
    its order key: see the module); its position."""
    return await bus.append(topic, _encode(batch), key=f"{batch.collection}/{change}", order_key=batch.collection,
                            headers={CHANGE: change})


class GraphsFromLog(Generic[G]):
    """Every collection's graph as the log has it, on one thread of the processor's own: each made by
    ``new_graph``, and a batch checked by ``check`` (raising) before it is logged."""

    def __init__(self, name: str, data_dir: Path, bus: LogTopics, new_graph: Callable[[], G],
                 check: Callable[[LoadTriples], Any], *, topic: str, apply_timeout_s: float,
                 report_interval_s: float = 5.0) -> None:
        self.name = name
        self.data_dir = data_dir
        self._new_graph, self._check = new_graph, check
        self.graphs: dict[str, G] = {}
        self.apply_timeout_s = apply_timeout_s
        self._thread = OneThread(name, closed_message="the graph store is closed")
        self._waiting: dict[str, IngestResult | None] = {}  # change id -> its result, once applied here
        self.topic = topic
        self.follower = LogFollower(bus, topic, LocalCopy(copy_path(data_dir, name)), self._applied, name=name)
        self.reports = ReportLoop(bus, self.follower, replica_id(name, data_dir), interval_s=report_interval_s)

    async def run(self, fn: Callable[..., T], *args) -> T:
        return await self._thread.run(fn, *args)

    async def start(self) -> None:
        self.reports.start()
        await self.follower.start()
        register_follower(self.follower, self.data_dir)  # for reads that must see a load
        log.info("%s: graphs from %s: %d records from the local copy, %d from the log; %s", self.name, self.topic,
                 self.follower.replayed, self.follower.read,
                 ", ".join(f"{c}: {len(g)} fact versions" for c, g in sorted(self.graphs.items())) or "no graphs")

    async def close(self) -> None:
        unregister_follower(self.follower, self.data_dir)
        try:
            await self.reports.close()
            await self.follower.close()
        finally:
            await self._thread.close()

    def existing(self) -> list[str]:
        return sorted(self.graphs)

    def open(self, collection: str) -> G:
        """The collection's graph (an empty one if the log has none); runs on the thread."""
        store = self.graphs.get(collection)
        return store if store is not None else self._new_graph()

    async def _applied(self, record: LogRecord) -> None:
        await self.run(self._apply, record)

    def _apply(self, record: LogRecord) -> None:
        """One record of the log, applied to its collection's graph (on the thread, in log order)."""
        if record.body is None:
            return  # nothing in the graph's log is ever removed; a tombstone here is not ragbus's
        batch = _decode(record.body)
        store = self.graphs.get(batch.collection)
        if store is None:
            store = self.graphs[check_collection(batch.collection)] = self._new_graph()
        change = record.headers.get(CHANGE)
        waited = change is not None and change in self._waiting
        result = store.apply(batch, warn=waited)
        if waited:
            assert change is not None
            self._waiting[change] = IngestResult(
                count=result.count, unchanged=result.unchanged, rejected=result.rejected,
                warnings=result.warnings, retracted=result.retracted,
            )

    async def load(self, batch: LoadTriples) -> IngestResult:
        """Append ``batch`` to the log, stamped; the result once this replica has applied it."""
        check_collection(batch.collection)
        self._check(batch)  # (its ontology:) an error refuses the batch before it is logged
        change = uuid.uuid4().hex
        self._waiting[change] = None
        try:
            position = await append_batch(self.follower.bus, self.topic, stamped(batch, datetime.now(UTC)), change)
            if not await self.follower.wait_for(position, self.apply_timeout_s):
                raise TimeoutError(
                    f"the batch was appended to {self.topic} at {position}, but this replica did not apply it "
                    f"within {self.apply_timeout_s} s; it will be applied when the replica catches up"
                )
            # The result is set on the thread, in the same call that applied the record.
            result = await self.run(self._waiting.get, change)
            if result is None:
                raise RuntimeError(f"the batch at {position} was applied without its result")  # not expected
            return msgspec.structs.replace(result, seen=[token(self.topic, position)])
        finally:
            self._waiting.pop(change, None)


async def started(name: str, data_dir: Path, bus: LogTopics, new_graph: Callable[[], G],
                  check: Callable[[LoadTriples], Any], *, topic: str, apply_timeout_s: float,
                  report_interval_s: float = 5.0) -> GraphsFromLog[G]:
    graphs = GraphsFromLog(name, data_dir, bus, new_graph, check, topic=topic, apply_timeout_s=apply_timeout_s,
                           report_interval_s=report_interval_s)
    try:
        await graphs.start()
    except BaseException:
        await asyncio.shield(graphs.close())
        raise
    return graphs
