"""documents-replica: a host's document stores (faiss, tantivy, the library) made from the bus's documents log.

On a deployment whose document stores come from the log (``changelog = true``), the writers
append every change to ``DOCUMENTS_LOG`` instead of writing files (``schema/changelog.py``), and
each query host runs one documents-replica, with a data dir of its own. It is that data dir's
writer: at start it takes the stores' writer locks, reads the log from its checkpoint (from the
start when it has none) and applies every record with the stores' own writers, as they would
have written it (a version staged, then switched to in one publish and one commit; a removal;
the library's record), so a reader of the data dir never sees half a version. It reports ready
once caught up, then follows the log. The host's query processors read the data dir as they read
a writer's (``refresh_interval_s``).

Applying a record again is harmless (a staged write replaces itself, a switch already made is
made, a removal of nothing removes nothing), so the replica keeps only a checkpoint file, made
durable after the stores fsynced what it applied; one killed in between re-applies the records
after it. A record the stores refuse (a dimension other than the collection's, a switch to a
version not wholly staged) is logged and skipped, as it is on every replica.

Concurrent writers of one document are ordinary: the last switch (or removal) in the log's
order is what every store serves, and the library follows the switches, not the order the
writers' records came in. A switch carrying the library's entry (document-load's) is applied to
the library with it, stamped with its own log token; a library record that names another version
than the stores serve (a write the log ordered before another writer's switch) is skipped.

With ``tombstones`` (one replica of a deployment, the ingestion host's), it also appends the
tombstones that let the broker's compaction forget what a switch or a removal superseded: the
runs of a document's other versions that a switch before made live, a discarded version's runs
and its discard. A run no switch has taken yet stays: a concurrent writer's switch to it may
still come. A replica starting from the compacted log then reads each document's live
version and nothing else. A removal and the library's record of it are not tombstoned: they stay
the latest records of their keys (two small records per document removed), so a replica that
lagged behind the log while compaction ran still reads the removal, however far behind it was
(a tombstone is itself dropped after the broker's ``delete.retention.ms``).

It answers ``ReplicaStatusRequest`` on its topic with where it stands.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from ragbus.config.settings import data_dir
from ragbus.doc_embeddings import DocEmbeddingsDeleteProcessor, DocEmbeddingsSettings, DocEmbeddingsStoreProcessor
from ragbus.keyword import KeywordDeleteProcessor, KeywordSettings, KeywordStoreProcessor
from ragbus.bus.positions import place
from ragbus.library import DocumentRecordProcessor, LibrarySettings
from ragbus.stores.seen import register_follower, unregister_follower
from ragbus.stores.snapshots import CheckpointFile
from ragbus.stores.follower import LogFollower
from ragbus.stores.data_dir_watch import DataDirWatch
from ragbus.stores.reports import ReportLoop, replica_id
from ragbus.runtime.envelope import Envelope, new_traceparent
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema import DeleteDocument, DocumentInfo, EmbeddedChunks, RecordDocument, decode
from ragbus.schema.changelog import (
    CHUNKS,
    KIND,
    RECORD,
    SWITCH,
    ReplicaStatus,
    ReplicaStatusRequest,
    discard_key,
    document_order,
    token,
)
from ragbus.schema.topics import DOCUMENTS_LOG

from .settings import ReplicaSettings

log = logging.getLogger(__name__)

CHECKPOINT = "documents.checkpoint"


@dataclass(slots=True)
class _Run:
    """A staged run of chunks the log holds: its version, where, and whether a switch to it came after it."""

    version: str
    at: tuple[str, tuple[int, ...]]
    taken: bool = False

    def before(self, at: tuple[str, tuple[int, ...]]) -> bool:
        return self.at[0] == at[0] and self.at[1] < at[1]


class DocumentsReplicaProcessor(Processor[ReplicaStatusRequest, ReplicaStatus]):
    request_type = ReplicaStatusRequest
    response_type = ReplicaStatus
    Settings = ReplicaSettings
    settings: ReplicaSettings
    starts_first = True  # the host's query processors read the data dir it makes: they join once it caught up

    def __init__(self, name: str, settings: ReplicaSettings) -> None:
        super().__init__(name, settings)
        self.data_dir = data_dir(settings.data_dir)
        self.log_topic = settings.log_topic or DOCUMENTS_LOG
        here = str(self.data_dir)  # the stores' own writers, in file mode, on this host's dir
        self._writers: dict[str, list[Any]] = {  # processors; the stores' have ``announce``
            CHUNKS: [DocEmbeddingsStoreProcessor(f"{name}/faiss", DocEmbeddingsSettings(data_dir=here)),
                     KeywordStoreProcessor(f"{name}/keyword", KeywordSettings(data_dir=here))],
            SWITCH: [DocEmbeddingsDeleteProcessor(f"{name}/faiss-switch", DocEmbeddingsSettings(data_dir=here)),
                     KeywordDeleteProcessor(f"{name}/keyword-switch", KeywordSettings(data_dir=here))],
            RECORD: [DocumentRecordProcessor(f"{name}/library", LibrarySettings(data_dir=here))],
        }
        self._types: dict[str, type] = {CHUNKS: EmbeddedChunks, SWITCH: DeleteDocument, RECORD: RecordDocument}
        self._started: list[Processor[Any, Any]] = []
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

    async def start(self) -> None:
        try:
            for writers in self._writers.values():
                for writer in writers:
                    writer.bus = self.bus
                    writer.announce = False  # the host's reads carry must_see (processors/stores/local_writes.py)
                    await writer.start()  # the data dir's writer locks: a second replica on it is refused
                    self._started.append(writer)
            if self.settings.tombstones:
                await self._learn_runs()
            self.follower = LogFollower(
                self.bus, self.log_topic, CheckpointFile(self.data_dir / ".replicas" / self.name / CHECKPOINT),
                self._apply, name=self.name, sync_interval_s=self.settings.sync_interval_s,
                batch=(self._begin_batch, self._end_batch) if self.settings.batch_s else None,
                batch_s=self.settings.batch_s,
            )
            self.reports = ReportLoop(self.bus, self.follower, replica_id(self.name, self.data_dir),
                                      interval_s=self.settings.report_interval_s)
            self.reports.start()  # from the start: a catch-up shows its progress
            await self.follower.start()
            register_follower(self.follower, self.data_dir)  # for the host's reads that must see a write
            self._watch = DataDirWatch(self.name, [self.data_dir, self.data_dir / ".replicas" / self.name], self.fail,
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
        while self._started:
            await self._started.pop().close()

    def _deferring(self) -> list[Any]:
        """The writers whose every change rewrites or commits a collection: the switches and removals."""
        return self._writers[SWITCH]

    async def _begin_batch(self) -> None:
        for writer in self._deferring():
            await writer.defer_publishing()

    async def _end_batch(self) -> None:
        for writer in self._deferring():
            await writer.publish_deferred()

    async def _apply(self, record) -> None:
        if self.settings.tombstones:
            self._saw(record)
        if record.body is None:
            self._forget(record.key)
            return  # a tombstone: what it removed was removed by the record before it
        kind = record.headers.get(KIND)
        if kind not in self._writers:
            raise ValueError(f"a record of kind {kind!r} is not a document store's")
        request: Any = decode(record.body, self._types[kind])
        context = RequestContext(
            envelope=Envelope(request_id=record.position, reply_to=None, attempt=1, deadline_ms=None,
                              traceparent=new_traceparent()),
            topic=self.log_topic, delivery_attempt=1,
        )
        if kind == RECORD:
            request = await self._as_served(request)
            if request is None:
                return
        for writer in self._writers[kind]:
            await writer.handle(request, context)
        if kind == SWITCH:
            await self._switched(request, token(self.log_topic, record.position), context)
        if self.settings.tombstones:
            await self._tombstone(record, kind, request)

    async def _served(self, collection: str) -> dict[str, tuple[str, str]]:
        live = self._live.get(collection)
        if live is None:  # first met since start: what this host's stores serve
            faiss = self._writers[SWITCH][0]
            assert isinstance(faiss, DocEmbeddingsDeleteProcessor)
            served = await faiss.served_versions(collection)
            live = self._live[collection] = {d: (v, "") for d, v in served.items()}
        return live

    async def _switched(self, change: DeleteDocument, seen: str, context: RequestContext) -> None:
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
        for writer in self._writers[RECORD]:
            await writer.handle(record, context)

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
        async with await self.bus.read_log(self.log_topic) as reader:
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

    async def handle(self, request: ReplicaStatusRequest, context: RequestContext) -> ReplicaStatus:
        follower = self.follower
        if follower is None:
            raise RuntimeError(f"{self.name} is not started")
        return ReplicaStatus(
            log_topic=self.log_topic, data_dir=str(self.data_dir), replayed=follower.replayed, read=follower.read,
            caught_up=await follower.caught_up(), checkpoint=follower.checkpoint() or "",
        )
