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

The two writers of one ``data_dir`` share one tantivy writer per collection
when they run in the same process (a directory takes one writer, in any
process), so run them in one worker process: ``ragbus worker keyword-store
keyword-delete``; query replicas may run anywhere that sees the directory.
The first of them to start in a process takes the data directory's keyword
writer lock (``processors/stores/writer_lock.py``) for as long as either
runs: tantivy locks an index only when its first write opens it, so without
it a second writer process would start, report ready, and then fail every
write with ``LockBusy``.

Every tantivy call runs on a thread of the processor's own, never on the
event loop: a commit fsyncs (tens of milliseconds), a search over a large
index takes milliseconds. One thread each, not a pool: the writer's
delete-then-add-then-commit of one batch must not interleave with another
batch's, and serialising them costs nothing since commits serialise inside
tantivy anyway; a query replica's reload bookkeeping needs no lock, and
tantivy releases the GIL while it searches, so the loop stays responsive.
More query throughput = more replicas. The default executor is left to the
other processors of the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from ragbus.config.settings import data_dir
from ragbus.stores.seen import wait_seen
from ragbus.stores.local_writes import Freshness, published
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.stores.staging import KEYWORD_STAGING, HeldDrops, Staging
from ragbus.stores.layout import staging_dir
from ragbus.stores.writer_lock import WriterLock, take_writer_lock
from ragbus.runtime.threads import OneThread
from ragbus.schema import (
    BadRequest,
    Chunk,
    DeleteDocument,
    EmbeddedChunks,
    IngestResult,
    KeywordQueryRequest,
    KeywordQueryResponse,
    check_collection,
    check_generation,
)
from ragbus.schema.topics import DOCUMENTS_LOG

from ragbus.stores.keywords.index import KeywordIndex, exists
from ragbus.stores.layout import keywords_dir
from ragbus.stores.keywords.settings import KeywordSettings

T = TypeVar("T")
Req = TypeVar("Req", bound=msgspec.Struct)


class _Worker:
    """One thread that runs every tantivy call of its owner, and the indexes it opened."""

    def __init__(self, name: str, data_dir: Path, settings: KeywordSettings, lock: WriterLock | None = None) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.indexes: dict[str, KeywordIndex] = {}
        self.lock = lock  # the writer's: released once its indexes are closed
        self.deferring = False  # the indexes' commits wait for a flush (a replica catching up)
        self.drops = HeldDrops()  # staged versions a deferred switch or removal superseded
        self._thread = OneThread(name, closed_message="the keyword index is closed")

    async def run(self, fn: Callable[..., T], *args) -> T:
        return await self._thread.run(fn, *args)

    async def close(self) -> None:
        """Close the indexes on the thread, after any write queued before; then end the thread."""
        if self._thread.closed:
            return
        try:
            await self.run(self._close_indexes)
        finally:
            await self._thread.close()
            if self.lock is not None:
                self.lock.release()  # after tantivy's own locks, so the next writer finds both free

    def _close_indexes(self) -> None:
        indexes, self.indexes = self.indexes, {}
        for index in indexes.values():
            index.close()


# The writer side: one _Worker per data_dir in this process, shared by its writer processors.
_writers: dict[Path, tuple[_Worker, int]] = {}
_writers_lock = threading.Lock()


def _acquire_writers(data_dir: Path, settings: KeywordSettings, processor: str) -> _Worker:
    """The process's writer for ``data_dir``; the first processor's writer settings apply.

    ``StoreLocked`` if another process writes the keyword indexes of ``data_dir``.
    """
    key = data_dir.resolve()
    with _writers_lock:
        worker, users = _writers.get(key, (None, 0))
        if worker is None:
            lock = take_writer_lock(key, "keyword", processor=processor)
            worker = _Worker("keyword-writer", key, settings, lock)
        _writers[key] = (worker, users + 1)
        return worker


async def _release_writers(worker: _Worker) -> None:
    with _writers_lock:
        _, users = _writers[worker.data_dir]
        if users > 1:
            _writers[worker.data_dir] = (worker, users - 1)
            return
        del _writers[worker.data_dir]
    await worker.close()


def _writer_index(worker: _Worker, collection: str, create: bool) -> KeywordIndex | None:
    index = worker.indexes.get(collection)
    if index is None:
        # A delete must not create a collection: it opens the writer of an existing one only.
        if not create and not exists(keywords_dir(worker.data_dir, collection)):
            return None
        index = KeywordIndex.open_writer(worker.data_dir, collection, worker.settings)
        if worker.deferring:
            index.defer()
        worker.indexes[collection] = index
    return index


def _set_deferring(worker: _Worker, on: bool) -> None:
    worker.deferring = on
    try:
        for index in worker.indexes.values():
            if on:
                index.defer()
            else:
                index.flush()
    except BaseException:
        worker.drops.forget()
        raise
    if not on:
        worker.drops.run()  # committed: what the switches superseded can go


class _KeywordWriter(Processor[Req, IngestResult]):
    """What the two writers share: the process's writer for their data_dir."""

    Settings = KeywordSettings
    settings: KeywordSettings

    def __init__(self, name: str, settings: KeywordSettings) -> None:
        super().__init__(name, settings)
        self._worker: _Worker | None = None
        # A writer says what it committed to this process's readers; a replica's writers do not
        # (processors/stores/local_writes.py).
        self.announce = True

    def _published(self, worker: _Worker, collections) -> None:
        if self.announce:
            for collection in set(collections):
                published(worker.data_dir, collection)

    async def start(self) -> None:
        if not self.settings.changelog:  # from the log, a replica's documents-replica writes the indexes
            self._worker = _acquire_writers(data_dir(self.settings.data_dir), self.settings, self.name)

    async def close(self) -> None:
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await _release_writers(worker)

    async def defer_publishing(self) -> None:
        """Hold the indexes' commits until ``publish_deferred``: one commit for many changes."""
        worker = self._require_worker()
        await worker.run(_set_deferring, worker, True)

    async def publish_deferred(self) -> None:
        worker = self._require_worker()
        await worker.run(_set_deferring, worker, False)

    def _require_worker(self) -> _Worker:
        if self._worker is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._worker


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
        worker = self._require_worker()
        by_collection: dict[str, list[Chunk]] = {}
        for chunk in request.chunks:
            by_collection.setdefault(check_collection(chunk.collection), []).append(chunk)
        # Several collections are committed one after the other; a failure part way is
        # answered as an error, and resending the message is harmless (upserts by chunk_id).
        if request.staged:
            return IngestResult(count=await worker.run(_stage, worker, by_collection))
        count = await worker.run(_store, worker, by_collection)
        self._published(worker, by_collection)
        return IngestResult(count=count)


def _stage(worker: _Worker, by_collection: dict[str, list[Chunk]]) -> int:
    count = 0
    for collection, chunks in by_collection.items():
        by_version: dict[tuple[str, str], list[Chunk]] = {}
        for chunk in chunks:
            by_version.setdefault((chunk.document_id, check_generation(chunk.generation)), []).append(chunk)
        staging = Staging(staging_dir(worker.data_dir, collection, KEYWORD_STAGING))
        for version in by_version.values():
            staging.put(version)
        count += len({c.chunk_id for c in chunks})
    return count


def _store(worker: _Worker, by_collection: dict[str, list[Chunk]]) -> int:
    count = 0
    for collection, chunks in by_collection.items():
        index = _writer_index(worker, collection, create=True)
        assert index is not None
        count += index.upsert(chunks)
        index.commit()
    return count


class KeywordDeleteProcessor(_KeywordWriter[DeleteDocument]):
    """Remove every chunk of a document; reply with how many were removed (0 for an unknown one)."""

    request_type = DeleteDocument
    response_type = IngestResult

    async def handle(self, request: DeleteDocument, context: RequestContext) -> IngestResult:
        check_collection(request.collection)
        if self.settings.changelog:  # the doc-embeddings delete writer logs the same switch or removal
            return IngestResult(count=request.chunks if request.activate else 0)
        worker = self._require_worker()
        if request.discard:
            staging = Staging(staging_dir(worker.data_dir, request.collection, KEYWORD_STAGING))
            await worker.run(staging.drop, request.document_id, request.discard)
            return IngestResult(count=0)
        if request.activate:
            count = await worker.run(_activate, worker, request)
        else:
            count = await worker.run(_delete, worker, request.collection, request.document_id)
        self._published(worker, [request.collection])
        return IngestResult(count=count)


def _activate(worker: _Worker, request: DeleteDocument) -> int:
    """The staged version replaces the document in one commit; refused (nothing changed) if it is incomplete."""
    document_id, version = request.document_id, request.activate
    staging = Staging(staging_dir(worker.data_dir, request.collection, KEYWORD_STAGING))
    chunks, _ = staging.read(document_id, version)
    index = _writer_index(worker, request.collection, create=True)
    assert index is not None
    if len(chunks) != request.chunks or not chunks:
        if index.versions(document_id) == {version if index.versioned else "": request.chunks}:
            return request.chunks  # switched already: this is the same switch again
        raise ValueError(
            f"{len(chunks)} chunk(s) of version {version} of document {document_id!r} are staged, "
            f"not {request.chunks}: the version is incomplete and was not switched to"
        )
    try:
        count = index.replace_document(document_id, chunks)
        index.commit()
    except BaseException:
        index.rollback()  # or the next commit would carry this half-done switch
        raise
    worker.drops.drop(staging, document_id, version, hold=worker.deferring)
    return count


def _delete(worker: _Worker, collection: str, document_id: str) -> int:
    """What is staged stays: a concurrent writer's version may still be switched to (schema/ingest.py)."""
    index = _writer_index(worker, collection, create=False)
    if index is None:
        return 0
    removed = index.delete_document(document_id)
    if removed:
        index.commit()
    return removed


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
        self._worker: _Worker | None = None
        self._fresh = Freshness()  # the writes published here it has reloaded after

    async def start(self) -> None:
        self._worker = _Worker("keyword-query", data_dir(self.settings.data_dir), self.settings)

    async def close(self) -> None:
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await worker.close()

    async def handle(self, request: KeywordQueryRequest, context: RequestContext) -> KeywordQueryResponse:
        if self._worker is None:
            raise RuntimeError(f"{self.name} is not started")
        if request.limit <= 0:
            raise BadRequest(f"limit must be at least 1, got {request.limit}")
        limit = min(request.limit, self.settings.max_limit)
        check_collection(request.collection)
        s = self.settings
        fresh = await wait_seen(request.must_see, self._worker.data_dir, s.log_topic or DOCUMENTS_LOG, s.fresh_wait_s,
                                from_log=s.changelog)
        fresh = self._fresh.stale(self._worker.data_dir, request.collection) or fresh
        if not request.query.strip():
            return KeywordQueryResponse(matches=[])
        matches = await self._worker.run(_search, self._worker, request.collection, request.query, limit, fresh)
        return KeywordQueryResponse(matches=matches)


def _search(worker: _Worker, collection: str, query: str, limit: int, fresh: bool = False):
    index = worker.indexes.get(collection)
    if index is not None and fresh:
        index.reload()  # the writes it must see are applied: see them now, not within refresh_interval_s
    if index is None:
        # Unknown collection: looked for again on every query (a stat), so it is found
        # as soon as a writer creates it.
        index = KeywordIndex.open_reader(worker.data_dir, collection, worker.settings)
        if index is None:
            return []
        worker.indexes[collection] = index
    return index.search(query, limit)
