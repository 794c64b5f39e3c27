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

It answers ``ReplicaStatusRequest`` on its topic with where it stands.
"""

from __future__ import annotations

import logging
from typing import Any

from config.settings import data_dir
from processors.doc_embeddings import DocEmbeddingsDeleteProcessor, DocEmbeddingsSettings, DocEmbeddingsStoreProcessor
from processors.keyword import KeywordDeleteProcessor, KeywordSettings, KeywordStoreProcessor
from processors.library import DocumentRecordProcessor, LibrarySettings
from processors.runtime.changelog import CheckpointFile, LogFollower
from processors.runtime.envelope import Envelope, new_traceparent
from processors.runtime.processor import Processor, RequestContext
from schema import DeleteDocument, EmbeddedChunks, RecordDocument, decode
from schema.changelog import CHUNKS, KIND, RECORD, SWITCH, ReplicaStatus, ReplicaStatusRequest
from schema.topics import DOCUMENTS_LOG

from .settings import ReplicaSettings

log = logging.getLogger(__name__)

CHECKPOINT = "documents.checkpoint"


class DocumentsReplicaProcessor(Processor[ReplicaStatusRequest, ReplicaStatus]):
    request_type = ReplicaStatusRequest
    response_type = ReplicaStatus
    Settings = ReplicaSettings
    settings: ReplicaSettings

    def __init__(self, name: str, settings: ReplicaSettings) -> None:
        super().__init__(name, settings)
        self.data_dir = data_dir(settings.data_dir)
        self.log_topic = settings.log_topic or DOCUMENTS_LOG
        here = str(self.data_dir)  # the stores' own writers, in file mode, on this host's dir
        self._writers: dict[str, list[Processor[Any, Any]]] = {
            CHUNKS: [DocEmbeddingsStoreProcessor(f"{name}/faiss", DocEmbeddingsSettings(data_dir=here)),
                     KeywordStoreProcessor(f"{name}/keyword", KeywordSettings(data_dir=here))],
            SWITCH: [DocEmbeddingsDeleteProcessor(f"{name}/faiss-switch", DocEmbeddingsSettings(data_dir=here)),
                     KeywordDeleteProcessor(f"{name}/keyword-switch", KeywordSettings(data_dir=here))],
            RECORD: [DocumentRecordProcessor(f"{name}/library", LibrarySettings(data_dir=here))],
        }
        self._types: dict[str, type] = {CHUNKS: EmbeddedChunks, SWITCH: DeleteDocument, RECORD: RecordDocument}
        self._started: list[Processor[Any, Any]] = []
        self.follower: LogFollower | None = None

    async def start(self) -> None:
        try:
            for writers in self._writers.values():
                for writer in writers:
                    writer.bus = self.bus
                    await writer.start()  # the data dir's writer locks: a second replica on it is refused
                    self._started.append(writer)
            self.follower = LogFollower(
                self.bus, self.log_topic, CheckpointFile(self.data_dir / ".replicas" / self.name / CHECKPOINT),
                self._apply, name=self.name, sync_interval_s=self.settings.sync_interval_s,
            )
            await self.follower.start()
        except BaseException:
            await self.close()
            raise
        log.info("%s: %s applied to %s: %d records", self.name, self.log_topic, self.data_dir, self.follower.read)

    async def close(self) -> None:
        if self.follower is not None:
            follower, self.follower = self.follower, None
            await follower.close()
        while self._started:
            await self._started.pop().close()

    async def _apply(self, record) -> None:
        if record.body is None:
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
        for writer in self._writers[kind]:
            await writer.handle(request, context)

    async def handle(self, request: ReplicaStatusRequest, context: RequestContext) -> ReplicaStatus:
        follower = self.follower
        if follower is None:
            raise RuntimeError(f"{self.name} is not started")
        return ReplicaStatus(
            log_topic=self.log_topic, data_dir=str(self.data_dir), replayed=follower.replayed, read=follower.read,
            caught_up=await follower.caught_up(), checkpoint=follower.checkpoint() or "",
        )
