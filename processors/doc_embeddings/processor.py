"""The doc-embeddings processors: search, fetch, store and delete chunks of a faiss store.

Query and fetch open collections read-only (any number of replicas); store and
delete write them (one process; see ``processors/stores/vectors/store.py`` for the format and for how
fast replicas see a write). A new version of a document is staged first
(``EmbeddedChunks(staged=True)``, kept in ``processors/stores/staging.py``) and switched to in one
publish (``DeleteDocument(activate=...)``), so queries never see it half done.

Threading: every store of a processor lives on that processor's own single
worker thread, and every blocking call (faiss, numpy, disk, flock) runs
there. The event loop is never blocked; a ``VectorStore`` needs no locks of
its own because only that thread touches it; concurrent requests simply
queue for it (a search takes milliseconds, and faiss parallelises one
search over the cores itself); and a long reload or write of one processor
does not occupy the default executor the other processors of the process
share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec

from ragbus.config.settings import data_dir
from ragbus.stores.seen import append_change, wait_seen
from ragbus.stores.local_writes import Freshness, published
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.threads import OneThread
from ragbus.schema import (
    BadRequest,
    ChunkMatch,
    DeleteDocument,
    DocEmbeddingsRequest,
    DocEmbeddingsResponse,
    EmbeddedChunks,
    FetchChunkRequest,
    FetchChunkResponse,
    IngestResult,
    check_collection,
    check_generation,
)
from ragbus.schema.changelog import CHUNKS, SWITCH, chunks_key, discard_key, document_order, state_key, token
from ragbus.schema.times import iso
from ragbus.schema.topics import DOCUMENTS_LOG

from ragbus.stores.vectors.settings import DocEmbeddingsSettings
from ragbus.stores.vectors.collections import VectorCollections
from ragbus.stores.vectors.store import VectorStore, as_matrix

T = TypeVar("T")
log = logging.getLogger(__name__)


class _StoreProcessor(Processor):
    """What the four share: settings, the worker thread, and the open stores by collection."""

    Settings = DocEmbeddingsSettings
    readonly: ClassVar[bool] = True

    settings: DocEmbeddingsSettings

    def __init__(self, name: str, settings: DocEmbeddingsSettings) -> None:
        super().__init__(name, settings)
        self.data_dir: Path | None = None
        self.collections: VectorCollections | None = None  # from start; touched only on the worker thread
        self._thread: OneThread | None = None  # from start to close
        self._saver: asyncio.Task[None] | None = None  # a reader's periodic index save
        self._fresh = Freshness()  # a reader: the writes published here it has reloaded after

    async def start(self) -> None:
        self.data_dir = data_dir(self.settings.data_dir)
        self.collections = VectorCollections(self.data_dir, self.settings, readonly=self.readonly)
        self._thread = OneThread(f"{self.name}-store")
        if self.readonly and self.settings.index_cache and self.settings.index_save_interval_s > 0:
            self._saver = asyncio.create_task(self._save_every(self.settings.index_save_interval_s))

    async def _save_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._blocking(self._collections().save_indexes)  # each store saves only an index changed since
            except Exception:  # a cache: the next save or a build makes up for it
                log.exception("%s: the vector indexes were not saved", self.name)

    async def close(self) -> None:
        if self._saver is not None:
            saver, self._saver = self._saver, None
            saver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await saver
        if self._thread is not None:
            if self.readonly:
                # What this replica added to an index since it was saved: the next start reads it.
                try:
                    await self._blocking(self._collections().save_indexes)
                except Exception:  # a cache: the next start builds the index instead
                    log.exception("%s: the vector indexes were not saved", self.name)
            thread, self._thread = self._thread, None
            await thread.close(cancel_pending=True)  # work not yet started is cancelled, not run
        self.collections = None

    @property
    def stores(self) -> dict[str, VectorStore]:
        """The stores opened so far, by collection (for tests and tools; touched on the worker thread)."""
        return {} if self.collections is None else self.collections.stores

    def _collections(self) -> VectorCollections:
        if self.collections is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.collections

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        if self._thread is None:
            raise RuntimeError(f"{self.name} is not started")
        return await self._thread.run(fn, *args)

    @property
    def _log_topic(self) -> str:
        return self.settings.log_topic or DOCUMENTS_LOG

    async def _seen(self, must_see: list[str], collection: str) -> bool:
        """Wait until this host's replica applied the writes a request must see; whether to reload first
        (there were some, or a writer of this process published to the collection since the last read)."""
        assert self.data_dir is not None
        s = self.settings
        seen = await wait_seen(must_see, self.data_dir, self._log_topic, s.fresh_wait_s, from_log=s.changelog)
        return self._fresh.stale(self.data_dir, collection) or seen

    def _published(self, collections) -> None:
        assert self.data_dir is not None
        for collection in set(collections):
            published(self.data_dir, collection)


class DocEmbeddingsQueryProcessor(_StoreProcessor):
    """``DocEmbeddingsRequest`` -> the best chunks for any of its vectors, text and metadata included.

    ``limit`` below 1 is refused; above ``max_limit`` it is clamped to
    ``max_limit``. No vectors, or a collection never written or emptied:
    no matches. NaN or infinite components, vectors of different lengths, or
    a dimension other than the collection's: a ValueError response.
    """

    request_type = DocEmbeddingsRequest
    response_type = DocEmbeddingsResponse

    async def handle(self, request: DocEmbeddingsRequest, context: RequestContext) -> DocEmbeddingsResponse:
        fresh = await self._seen(request.must_see, request.collection)
        return DocEmbeddingsResponse(matches=await self._blocking(self._query, request, fresh))

    def _query(self, request: DocEmbeddingsRequest, fresh: bool = False) -> list[ChunkMatch]:
        if request.limit < 1:
            raise BadRequest(f"limit must be at least 1, got {request.limit}")
        limit = min(request.limit, self.settings.max_limit)
        check_collection(request.collection)
        if not request.vectors:
            return []
        queries = as_matrix(request.vectors, "query vector")  # checked even when there is nothing to search
        store = self._collections().get(request.collection, create=False)
        if store is None:
            return []
        if fresh:
            store.refresh(force=True)
        return store.search(queries, limit)


class FetchChunkProcessor(_StoreProcessor):
    """``FetchChunkRequest`` -> the chunks found, in request order; unknown ids are left out."""

    request_type = FetchChunkRequest
    response_type = FetchChunkResponse

    async def handle(self, request: FetchChunkRequest, context: RequestContext) -> FetchChunkResponse:
        fresh = await self._seen(request.must_see, request.collection)
        return FetchChunkResponse(chunks=await self._blocking(self._fetch, request, fresh))

    def _fetch(self, request: FetchChunkRequest, fresh: bool = False) -> list[ChunkMatch]:
        store = self._collections().get(request.collection, create=False)
        if store is not None and fresh:
            store.refresh(force=True)
        return [] if store is None else store.fetch(request.chunk_ids)


class DocEmbeddingsStoreProcessor(_StoreProcessor):
    """``EmbeddedChunks`` (chunk-store) -> upsert, persisted before the reply; ``IngestResult(count)``.

    ``count`` is the number of distinct chunks of the request, all stored
    (a chunk id already stored is replaced, so a redelivered batch changes
    nothing). Every vector of a request must have one dimension, that of
    each collection it goes to (any, for an empty one). A batch spanning
    several collections is written collection by collection, after all of
    them were checked; a retry after a crash in between is harmless.
    ``staged``: the chunks are kept aside as their document's version
    (``Chunk.generation``) until a switch to it, queries see nothing of them.
    """

    request_type = EmbeddedChunks
    response_type = IngestResult
    readonly = False

    async def handle(self, request: EmbeddedChunks, context: RequestContext) -> IngestResult:
        if self.settings.changelog:
            return await self._append(request, context.envelope.request_id)
        count = await self._blocking(self._collections().upsert, request)
        if not request.staged:  # staged chunks are seen by nobody until their switch
            self._published(c.collection for c in request.chunks)
        return IngestResult(count=count)

    async def _append(self, request: EmbeddedChunks, write: str) -> IngestResult:
        """The write, a run of one document's version at a time, appended to the log (``schema/changelog.py``)."""
        chunks, vectors = request.chunks, request.vectors
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors: each chunk needs exactly one vector")
        if not chunks:
            return IngestResult(count=0)
        as_matrix(vectors)  # ragged, empty or non-finite vectors are refused before anything is logged
        runs: dict[tuple[str, str, str], list[int]] = {}
        for i, chunk in enumerate(chunks):
            check_generation(chunk.generation)
            runs.setdefault((check_collection(chunk.collection), chunk.document_id, chunk.generation), []).append(i)
        seen: list[str] = []
        for (collection, document_id, version), rows in runs.items():
            first = min(chunks[i].position for i in rows)
            run = EmbeddedChunks(chunks=[chunks[i] for i in rows], vectors=[vectors[i] for i in rows],
                                 staged=request.staged)
            seen.append(token(self._log_topic, await append_change(
                self.bus, self._log_topic, CHUNKS, run, key=chunks_key(collection, document_id, version, first, write),
                order_key=document_order(collection, document_id))))
        return IngestResult(count=len({c.chunk_id for c in chunks}), seen=seen)

class DocEmbeddingsDeleteProcessor(_StoreProcessor):
    """``DeleteDocument`` (document-delete) -> remove its chunks; ``IngestResult(count=removed)``.

    With ``activate``, the staged version replaces the document in one publish
    (``count``: its chunks); with ``discard``, the staged version is dropped (``count`` 0).
    """

    request_type = DeleteDocument
    response_type = IngestResult
    readonly = False

    async def handle(self, request: DeleteDocument, context: RequestContext) -> IngestResult:
        if self.settings.changelog:
            return await self._append(request)
        count = await self._blocking(self._collections().change, request)
        if not request.discard:  # a switch or a removal: what queries see changed
            self._published([request.collection])
        return IngestResult(count=count)

    async def _append(self, request: DeleteDocument) -> IngestResult:
        """The switch, discard or removal appended to the log; the chunks switched to (a removal's count
        is each replica's to know: 0 here)."""
        collection, document_id = check_collection(request.collection), request.document_id
        if request.discard:
            key = discard_key(collection, document_id, check_generation(request.discard))
        else:
            key = state_key(collection, document_id)
            if request.activate:
                check_generation(request.activate)
                if request.document is not None and request.document.ingested_at is None:  # dated once, here
                    stamped = msgspec.structs.replace(request.document, ingested_at=iso(datetime.now(UTC)))
                    request = msgspec.structs.replace(request, document=stamped)
        position = await append_change(self.bus, self._log_topic, SWITCH, request, key=key,
                                       order_key=document_order(collection, document_id))
        return IngestResult(count=request.chunks if request.activate else 0, seen=[token(self._log_topic, position)])
