"""The keyword processors: BM25 search over chunks, and the writers that keep the index.

- ``KeywordQueryProcessor``: ``KeywordQueryRequest`` -> ``KeywordQueryResponse``.
  Any number of replicas, each reading the indexes read-only.
- ``KeywordStoreProcessor``: ``EmbeddedChunks`` (its chunks; vectors are
  ignored) from ``chunk-store`` -> upsert and commit -> ``IngestResult``;
  ``staged`` ones are kept aside (``processors/stores/staging.py``) as their document's version.
- ``KeywordDeleteProcessor``: ``DeleteDocument`` from ``document-delete`` ->
  ``IngestResult(count=chunks removed)``; with ``activate``, the staged version
  replaces the document in one commit (``count``: its chunks); with ``discard``,
  the staged version is dropped.

The two writers of one ``data_dir`` share the process's one writer of it (and its writer lock:
``processors/stores/keywords/indexes.py``), so run them in one worker process: ``ragbus worker
keyword-store keyword-delete``; query replicas may run anywhere that sees the directory. More
query throughput = more replicas.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from ragbus.config.settings import data_dir
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema import (
    BadRequest,
    DeleteDocument,
    EmbeddedChunks,
    IngestResult,
    KeywordQueryRequest,
    KeywordQueryResponse,
    check_collection,
)
from ragbus.schema.topics import DOCUMENTS_LOG
from ragbus.stores.keywords.indexes import Indexes, KeywordWriter, acquire_writer, release_writer
from ragbus.stores.keywords.settings import KeywordSettings
from ragbus.stores.local_writes import Freshness, published
from ragbus.stores.seen import wait_seen

Req = TypeVar("Req", bound=msgspec.Struct)


class _KeywordWriter(Processor[Req, IngestResult]):
    """What the two writers share: the process's writer for their data_dir."""

    Settings = KeywordSettings
    settings: KeywordSettings

    def __init__(self, name: str, settings: KeywordSettings) -> None:
        super().__init__(name, settings)
        self._writer: KeywordWriter | None = None

    def _published(self, writer: KeywordWriter, collections) -> None:
        for collection in set(collections):
            published(writer.data_dir, collection)

    async def start(self) -> None:
        if not self.settings.changelog:  # from the log, a replica's documents-replica writes the indexes
            self._writer = acquire_writer(data_dir(self.settings.data_dir), self.settings, self.name)

    async def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await release_writer(writer)

    def _require_writer(self) -> KeywordWriter:
        if self._writer is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._writer


class KeywordStoreProcessor(_KeywordWriter[EmbeddedChunks]):
    """Upsert the chunks of a ``chunk-store`` message; reply with how many distinct chunks were stored."""

    request_type = EmbeddedChunks
    response_type = IngestResult

    async def handle(self, request: EmbeddedChunks, context: RequestContext) -> IngestResult:
        if self.settings.changelog:
            # The doc-embeddings writer logs the same chunks, text and all: every replica indexes them from there.
            for chunk in request.chunks:
                check_collection(chunk.collection)
            return IngestResult(count=len({c.chunk_id for c in request.chunks}))
        writer = self._require_writer()
        count = await writer.run(writer.upsert, request.chunks, request.staged)
        if not request.staged:
            self._published(writer, (c.collection for c in request.chunks))
        return IngestResult(count=count)


class KeywordDeleteProcessor(_KeywordWriter[DeleteDocument]):
    """Remove every chunk of a document; reply with how many were removed (0 for an unknown one)."""

    request_type = DeleteDocument
    response_type = IngestResult

    async def handle(self, request: DeleteDocument, context: RequestContext) -> IngestResult:
        check_collection(request.collection)
        if self.settings.changelog:  # the doc-embeddings delete writer logs the same switch or removal
            return IngestResult(count=request.chunks if request.activate else 0)
        writer = self._require_writer()
        count = await writer.run(writer.change, request)
        if not request.discard:
            self._published(writer, [request.collection])
        return IngestResult(count=count)


class KeywordQueryProcessor(Processor[KeywordQueryRequest, KeywordQueryResponse]):
    """BM25 over the chunks of one collection, for the user's raw query text.

    ``limit`` <= 0 is refused (BadRequest: an error response); a limit above
    ``max_limit`` is clamped to it. An empty or blank query, a query with no
    searchable token, and a collection no chunk was ever stored in all get no
    matches. Commits of the writer become visible within ``refresh_interval_s``.
    """

    request_type = KeywordQueryRequest
    response_type = KeywordQueryResponse
    Settings = KeywordSettings

    settings: KeywordSettings

    def __init__(self, name: str, settings: KeywordSettings) -> None:
        super().__init__(name, settings)
        self._indexes: Indexes | None = None
        self._fresh = Freshness()  # the writes published here it has reloaded after

    async def start(self) -> None:
        self._indexes = Indexes("keyword-query", data_dir(self.settings.data_dir), self.settings)

    async def close(self) -> None:
        if self._indexes is not None:
            indexes, self._indexes = self._indexes, None
            await indexes.close()

    async def handle(self, request: KeywordQueryRequest, context: RequestContext) -> KeywordQueryResponse:
        indexes = self._indexes
        if indexes is None:
            raise RuntimeError(f"{self.name} is not started")
        if request.limit <= 0:
            raise BadRequest(f"limit must be at least 1, got {request.limit}")
        limit = min(request.limit, self.settings.max_limit)
        check_collection(request.collection)
        s = self.settings
        fresh = await wait_seen(request.must_see, indexes.data_dir, s.log_topic or DOCUMENTS_LOG, s.fresh_wait_s,
                                from_log=s.changelog)
        fresh = self._fresh.stale(indexes.data_dir, request.collection) or fresh
        if request.statistics_only:
            statistics = await indexes.run(indexes.statistics, request.collection, request.query, fresh)
            return KeywordQueryResponse(statistics=statistics)
        if not request.query.strip():
            return KeywordQueryResponse(matches=[])
        matches = await indexes.run(indexes.search, request.collection, request.query, limit, fresh,
                                    request.statistics)
        return KeywordQueryResponse(matches=matches)

