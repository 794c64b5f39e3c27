"""``DocumentsReplica``: a host's document stores (faiss, tantivy, the library) made from the documents log.

It is its data dir's writer: ``start`` takes the stores' writer locks, reads the log from its
checkpoint (from the start when it has none) and applies every record with the stores' own writers
(a version staged, then switched to in one publish and one commit; a removal; the library's
record), so a reader of the data dir never sees half a version; it returns once caught up and then
follows the log. Applying a record again is harmless, so only a checkpoint is kept. The library
follows the switches, in the log's order, whatever order the writers' records came in. With
``tombstones`` it also appends the tombstones that let compaction forget what a switch or removal
superseded. The whole story: docs/stores-from-the-log.md ("Replicas", "Compaction").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ragbus.bus import LogTopics
from ragbus.bus.positions import place
from ragbus.runtime.threads import OneThread
from ragbus.schema import DeleteDocument, DocumentInfo, EmbeddedChunks, RecordDocument, decode
from ragbus.schema.changelog import CHUNKS, KIND, RECORD, SWITCH, ReplicaStatus, discard_key, document_order, token

from .data_dir_watch import DataDirWatch
from .follower import LogFollower
from .keywords.indexes import KeywordWriter, acquire_writer, release_writer
from .keywords.settings import KeywordSettings
from .layout import replica_dir
from .library import Libraries
from .replica_settings import ReplicaSettings
from .reports import ReportLoop, replica_id
from .seen import register_follower, unregister_follower
from .snapshots import CheckpointFile
from .vectors.collections import VectorCollections
from .vectors.settings import DocEmbeddingsSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

CHECKPOINT = "documents.checkpoint"
_TYPES: dict[str, type] = {CHUNKS: EmbeddedChunks, SWITCH: DeleteDocument, RECORD: RecordDocument}


@dataclass(slots=True)
class _Run:
    """A staged run of chunks the log holds: its version, where, and whether a switch to it came after it."""

    version: str
    at: tuple[str, tuple[int, ...]]
    taken: bool = False

    def before(self, at: tuple[str, tuple[int, ...]]) -> bool:
        return self.at[0] == at[0] and self.at[1] < at[1]


class _Vectors:
    """A writer's faiss collections on a thread of their own (every call touches the stores)."""

    def __init__(self, name: str, data_dir: Path) -> None:
        self.collections = VectorCollections(data_dir, DocEmbeddingsSettings(data_dir=str(data_dir)), readonly=False)
        self._thread = OneThread(name)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._thread.run(fn, *args)

    @property
    def closed(self) -> bool:
        return self._thread.closed

    async def close(self) -> None:
        await self._thread.close(cancel_pending=True)


class DocumentsReplica:
    """The document stores of ``data_dir`` made from ``log_topic``: ``start``, ``status``, ``close``.

    ``on_gone`` is called with the error when the data dir is removed or replaced under it.
    """

    def __init__(self, name: str, data_dir: Path, log_topic: str, settings: ReplicaSettings,
                 on_gone: Callable[[BaseException], Any], *, partitions: Collection[int] | None = None,
                 shard: int | None = None, serving: Callable[[], bool] | None = None, shards: int | None = None,
                 host: str = "") -> None:
        self._bus: LogTopics | None = None  # from start
        # A shard's replica: only these partitions of the log; its reports say which shard of how many, and
        # whether served, under the shard host's host id (so status names hosts as the owners' group does).
        self.partitions, self.shard, self._serving, self.shards = partitions, shard, serving, shards
        self.host = host
        self.name, self.data_dir, self.log_topic = name, data_dir, log_topic
        self.settings = settings
        self._on_gone = on_gone
        # The stores' writers on this host's dir, as the file-mode writer processors hold them: the chunks'
        # and the switches' faiss collections each on a thread, the process's keyword writer, the library.
        self._chunks = _Vectors(f"{name}/faiss", data_dir)
        self._switches = _Vectors(f"{name}/faiss-switch", data_dir)
        self._keywords: KeywordWriter | None = None
        self._libraries = Libraries(data_dir, writer=True)
        self.follower: LogFollower | None = None
        # With ``tombstones``: every live run of chunks seen, by document (order key), by its key.
        self._runs: dict[str, dict[str, _Run]] = {}
        # What the stores serve of each document, by collection: (version, the token of the switch to it;
        # "" when learned from the stores at start). Absent: not served. The library follows it.
        self._live: dict[str, dict[str, tuple[str, str]]] = {}
        # With ``tombstones``: where each key's latest record is, in the whole log as learned at start and
        # as applied since. A replica replaying the log behind its end must not tombstone a key a later
        # record of which it has not applied yet: an old switch would remove the live version's run.
        self._latest: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.reports: ReportLoop | None = None
        self._watch: DataDirWatch | None = None

    async def start(self, bus: LogTopics) -> None:
        """Take the writer locks (a second replica on the data dir is refused), catch up on ``bus``, then follow."""
        self._bus = bus
        if self._chunks.closed:  # a replica closed and started again
            self._chunks = _Vectors(f"{self.name}/faiss", self.data_dir)
            self._switches = _Vectors(f"{self.name}/faiss-switch", self.data_dir)
        self._live.clear()
        self._runs.clear()
        self._latest.clear()
        try:
            here = str(self.data_dir)
            self._keywords = acquire_writer(self.data_dir, KeywordSettings(data_dir=here), f"{self.name}/keyword")
            self._libraries.open(f"{self.name}/library")
            if self.settings.tombstones:
                await self._learn_runs()
            own = replica_dir(self.data_dir, self.name)
            self.follower = LogFollower(
                bus, self.log_topic, CheckpointFile(own / CHECKPOINT), self._apply, name=self.name,
                sync_interval_s=self.settings.sync_interval_s,
                batch=(self._begin_batch, self._end_batch) if self.settings.batch_s else None,
                batch_s=self.settings.batch_s, partitions=self.partitions,
            )
            self.reports = ReportLoop(bus, self.follower, replica_id(self.name, self.data_dir, self.host),
                                      interval_s=self.settings.report_interval_s, shard=self.shard,
                                      serving=self._serving, shards=self.shards, host=self.host)
            self.reports.start()  # from the start: a catch-up shows its progress
            await self.follower.start()
            register_follower(self.follower, self.data_dir)  # for the host's reads that must see a write
            self._watch = DataDirWatch(self.name, [self.data_dir, own], self._on_gone,
                                       interval_s=self.settings.data_dir_check_s).start()
        except BaseException:
            await self.close()
            raise
        log.info("%s: %s applied to %s: %d records", self.name, self.log_topic, self.data_dir, self.follower.read)

    async def close(self) -> None:
        if self._watch is not None:
            watch, self._watch = self._watch, None
            await watch.close()
        if self.reports is not None:
            reports, self.reports = self.reports, None
            await reports.close()
        if self.follower is not None:
            follower, self.follower = self.follower, None
            unregister_follower(follower, self.data_dir)
            await follower.close()
        await self._chunks.close()
        await self._switches.close()
        if self._keywords is not None:
            keywords, self._keywords = self._keywords, None
            await release_writer(keywords)
        self._libraries.close()

    async def status(self) -> ReplicaStatus:
        follower = self.follower
        if follower is None:
            raise RuntimeError(f"{self.name} is not started")
        return ReplicaStatus(
            log_topic=self.log_topic, data_dir=str(self.data_dir), replayed=follower.replayed, read=follower.read,
            caught_up=await follower.caught_up(), checkpoint=follower.checkpoint() or "",
        )

    @property
    def bus(self) -> LogTopics:
        if self._bus is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._bus

    def _keywords_writer(self) -> KeywordWriter:
        if self._keywords is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._keywords

    async def _defer(self, on: bool) -> None:
        """The switches and removals (every one rewrites or commits a collection) held, or published at once."""
        await self._switches.run(self._switches.collections.set_deferring, on)
        await self._keywords_writer().run(self._keywords_writer().set_deferring, on)

    async def _begin_batch(self) -> None:
        await self._defer(True)

    async def _end_batch(self) -> None:
        await self._defer(False)

    async def _apply(self, record) -> None:
        if self.settings.tombstones:
            self._saw(record)
        if record.body is None:
            self._forget(record.key)
            return  # a tombstone: what it removed was removed by the record before it
        kind = record.headers.get(KIND)
        if kind not in _TYPES:
            raise ValueError(f"a record of kind {kind!r} is not a document store's")
        request: Any = decode(record.body, _TYPES[kind])
        if kind == CHUNKS:
            await self._chunks.run(self._chunks.collections.upsert, request)
            await self._keywords_writer().run(self._keywords_writer().upsert, request.chunks, request.staged)
        elif kind == SWITCH:
            await self._switches.run(self._switches.collections.change, request)
            await self._keywords_writer().run(self._keywords_writer().change, request)
            await self._switched(request, token(self.log_topic, record.position))
        else:
            request = await self._as_served(request)
            if request is None:
                return
            self._libraries.record(request)
        if self.settings.tombstones:
            await self._tombstone(record, kind, request)

    async def _served(self, collection: str) -> dict[str, tuple[str, str]]:
        live = self._live.get(collection)
        if live is None:  # first met since start: what this host's stores serve
            served = await self._switches.run(self._switches.collections.served_versions, collection)
            live = self._live[collection] = {d: (v, "") for d, v in served.items()}
        return live

    async def _switched(self, change: DeleteDocument, seen: str) -> None:
        """The stores took a switch or a removal: the library follows, with the entry the switch carries."""
        if change.discard:
            return
        live = await self._served(change.collection)
        if change.activate:
            live[change.document_id] = (change.activate, seen)
            if change.document is None:  # a writer older than entries on switches: its record follows
                return
            entry = msgspec.structs.replace(change.document, document_id=change.document_id,
                                            collection=change.collection, generation=change.activate, seen=seen)
            record = RecordDocument(document=entry)
        else:
            live.pop(change.document_id, None)
            record = RecordDocument(document=DocumentInfo(document_id=change.document_id,
                                                          collection=change.collection), removed=True)
        self._libraries.record(record)

    async def _as_served(self, record: RecordDocument) -> RecordDocument | None:
        """A library record as the stores serve it, or None when it names what they do not (superseded)."""
        doc = record.document
        held = (await self._served(doc.collection)).get(doc.document_id)
        if record.removed:
            if held is None:
                return record
        elif held is not None and held[0] == doc.generation:
            return msgspec.structs.replace(record, document=msgspec.structs.replace(doc, seen=held[1]))
        log.info("%s: the record of %r (%s) is superseded: the stores serve %s", self.name, doc.document_id,
                 "removed" if record.removed else f"version {doc.generation}",
                 f"version {held[0]}" if held else "none of it")
        return None

    async def _learn_runs(self) -> None:
        """Every live run of the log as it stands (its keys, and the versions of its runs)."""
        async with await self.bus.read_log(self.log_topic, partitions=self.partitions) as reader:
            while not await reader.caught_up():
                record = await reader.next()
                self._saw(record)
                kind = record.headers.get(KIND)
                if record.body is None:
                    self._forget(record.key)
                elif kind == CHUNKS:
                    self._remember(record.key, decode(record.body, EmbeddedChunks), record.position)
                elif kind == SWITCH:
                    self._superseded(decode(record.body, DeleteDocument), record.position)

    def _saw(self, record) -> None:
        where = place(record.position)
        held = self._latest.get(record.key)
        if held is None or held[0] != where[0] or held[1] < where[1]:
            self._latest[record.key] = where

    def _nothing_later(self, key: str, position: str) -> bool:
        """Whether no record of ``key`` after ``position`` is known (one in another partition counts as later:
        a document's records share a partition, so that would be a key reused elsewhere, left alone)."""
        held, at = self._latest.get(key), place(position)
        return held is None or (held[0] == at[0] and held[1] <= at[1])

    def _remember(self, key: str, run: EmbeddedChunks, position: str) -> None:
        if run.chunks:
            first = run.chunks[0]
            runs = self._runs.setdefault(document_order(first.collection, first.document_id), {})
            runs[key] = _Run(first.generation, place(position))

    def _forget(self, key: str) -> None:
        for runs in self._runs.values():
            runs.pop(key, None)

    def _superseded(self, change: DeleteDocument, position: str) -> list[str]:
        """The keys a switch, discard or removal at ``position`` leaves with nothing to say, forgotten here;
        not a key with a later record (replayed behind the log's end, an old switch supersedes nothing newer)."""
        order = document_order(change.collection, change.document_id)
        runs = self._runs.get(order, {})
        at = place(position)
        if change.activate:
            for run in runs.values():
                if run.version == change.activate and run.before(at):
                    run.taken = True
            # Another version's runs go once a switch took them: one no switch took may be a concurrent
            # writer's, whose switch the log orders after this one.
            gone = [k for k, run in runs.items() if run.version != change.activate and run.taken and run.before(at)]
        elif change.discard:
            gone = [k for k, run in runs.items() if run.version == change.discard and run.before(at)]
            gone.append(discard_key(change.collection, change.document_id, change.discard))
        else:  # a removal: the runs switches took go; the removal itself stays its state's latest record
            gone = [k for k, run in runs.items() if run.taken and run.before(at)]
        gone = [key for key in gone if self._nothing_later(key, position)]
        for key in gone:
            runs.pop(key, None)
        if not runs:
            self._runs.pop(order, None)
        return gone

    async def _tombstone(self, record, kind: str, request: Any) -> None:
        if kind == CHUNKS:
            self._remember(record.key, request, record.position)
            return
        if kind != SWITCH:  # the library's record, of a document stored or removed: the latest of its key stays
            return
        order = document_order(request.collection, request.document_id)
        for key in self._superseded(request, record.position):
            await self.bus.append(self.log_topic, None, key=key, order_key=order)
