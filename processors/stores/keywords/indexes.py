"""The keyword indexes of a data dir, on one thread: ``Indexes`` for a reader, ``KeywordWriter`` for the writer.

Every tantivy call runs on its owner's own thread, never on the event loop: a commit fsyncs (tens
of milliseconds), a search over a large index takes milliseconds. One thread each, not a pool: a
writer's delete-then-add-then-commit of one batch must not interleave with another batch's (commits
serialise inside tantivy anyway), and a reader's reload bookkeeping then needs no lock.

A data dir's indexes take one writer, in any process, so the writers of one process share one
``KeywordWriter`` per data dir (``acquire_writer``, ``release_writer``): keyword-store and
keyword-delete, or the documents replica. The first takes the data dir's keyword writer lock
(``writer_lock.py``) for as long as any holds it: tantivy locks an index only when its first write
opens it, so without it a second writer process would start, report ready, and fail every write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ragbus.runtime.threads import OneThread
from ragbus.schema import Chunk, ChunkMatch, DeleteDocument, check_collection, check_generation
from ragbus.schema.retrieval import KeywordStatistics

from ..layout import keywords_dir, staging_dir
from ..staging import KEYWORD_STAGING, HeldDrops, Staging
from ..writer_lock import WriterLock, take_writer_lock
from .index import KeywordIndex, exists
from .settings import KeywordSettings

T = TypeVar("T")


class Indexes:
    """One thread that runs every tantivy call of its owner, and the indexes it opened."""

    def __init__(self, name: str, data_dir: Path, settings: KeywordSettings, lock: WriterLock | None = None) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.indexes: dict[str, KeywordIndex] = {}
        self.lock = lock  # the writer's: released once its indexes are closed
        self._thread = OneThread(name, closed_message="the keyword index is closed")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
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

    def search(self, collection: str, query: str, limit: int, fresh: bool = False,
               statistics: KeywordStatistics | None = None) -> list[ChunkMatch]:
        """A reader's search (on the thread): ``fresh`` reloads first, to see writes it must see now;
        ``statistics``: scored as an index with these (``KeywordIndex.search``)."""
        index = self._reader(collection, fresh)
        return [] if index is None else index.search(query, limit, statistics)

    def statistics(self, collection: str, query: str, fresh: bool = False) -> KeywordStatistics:
        """A reader's BM25 statistics of the terms of ``query`` (on the thread); none for a collection it lacks."""
        index = self._reader(collection, fresh)
        return KeywordStatistics() if index is None else index.statistics(query)

    def _reader(self, collection: str, fresh: bool) -> KeywordIndex | None:
        index = self.indexes.get(collection)
        if index is not None and fresh:
            index.reload()
        if index is None:
            # Unknown collection: looked for again on every query (a stat), so it is found
            # as soon as a writer creates it.
            index = KeywordIndex.open_reader(self.data_dir, collection, self.settings)
            if index is None:
                return None
            self.indexes[collection] = index
        return index


class KeywordWriter(Indexes):
    """The writer of a data dir's keyword indexes; its methods run on its thread (``run``)."""

    def __init__(self, name: str, data_dir: Path, settings: KeywordSettings, lock: WriterLock) -> None:
        super().__init__(name, data_dir, settings, lock)
        self.deferring = False  # the indexes' commits wait for a flush (a replica catching up)
        self.drops = HeldDrops()  # staged versions a deferred switch or removal superseded

    def index(self, collection: str, *, create: bool) -> KeywordIndex | None:
        index = self.indexes.get(collection)
        if index is None:
            # A delete must not create a collection: it opens the writer of an existing one only.
            if not create and not exists(keywords_dir(self.data_dir, collection)):
                return None
            index = KeywordIndex.open_writer(self.data_dir, collection, self.settings)
            if self.deferring:
                index.defer()
            self.indexes[collection] = index
        return index

    def set_deferring(self, on: bool) -> None:
        """Hold the indexes' commits until called again with False: one commit for many changes."""
        self.deferring = on
        try:
            for index in self.indexes.values():
                if on:
                    index.defer()
                else:
                    index.flush()
        except BaseException:
            self.drops.forget()
            raise
        if not on:
            self.drops.run()  # committed: what the switches superseded can go

    def staging(self, collection: str) -> Staging:
        return Staging(staging_dir(self.data_dir, collection, KEYWORD_STAGING))

    def stage(self, by_collection: dict[str, list[Chunk]]) -> int:
        count = 0
        for collection, chunks in by_collection.items():
            by_version: dict[tuple[str, str], list[Chunk]] = {}
            for chunk in chunks:
                by_version.setdefault((chunk.document_id, check_generation(chunk.generation)), []).append(chunk)
            staging = self.staging(collection)
            for version in by_version.values():
                staging.put(version)
            count += len({c.chunk_id for c in chunks})
        return count

    def store(self, by_collection: dict[str, list[Chunk]]) -> int:
        count = 0
        for collection, chunks in by_collection.items():
            index = self.index(collection, create=True)
            assert index is not None
            count += index.upsert(chunks)
            index.commit()
        return count

    def upsert(self, chunks: list[Chunk], staged: bool) -> int:
        """Store (or, ``staged``, stage) the chunks, collection by collection; how many distinct chunks."""
        by_collection: dict[str, list[Chunk]] = {}
        for chunk in chunks:
            by_collection.setdefault(check_collection(chunk.collection), []).append(chunk)
        # Several collections are committed one after the other; a failure part way is
        # answered as an error, and resending the message is harmless (upserts by chunk_id).
        return self.stage(by_collection) if staged else self.store(by_collection)

    def change(self, request: DeleteDocument) -> int:
        """A switch to a staged version (its chunks), a discard (0) or a removal (the chunks removed)."""
        check_collection(request.collection)
        if request.discard:
            self.staging(request.collection).drop(request.document_id, request.discard)
            return 0
        if request.activate:
            return self._activate(request)
        return self._delete(request.collection, request.document_id)

    def _activate(self, request: DeleteDocument) -> int:
        """The staged version replaces the document in one commit; refused (nothing changed) if it is incomplete."""
        document_id, version = request.document_id, request.activate
        staging = self.staging(request.collection)
        chunks, _ = staging.read(document_id, version)
        index = self.index(request.collection, create=True)
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
        self.drops.drop(staging, document_id, version, hold=self.deferring)
        return count

    def _delete(self, collection: str, document_id: str) -> int:
        """What is staged stays: a concurrent writer's version may still be switched to (schema/ingest.py)."""
        index = self.index(collection, create=False)
        if index is None:
            return 0
        removed = index.delete_document(document_id)
        if removed:
            index.commit()
        return removed


# One KeywordWriter per data dir in this process, shared by its writers, with how many hold it.
_writers: dict[Path, tuple[KeywordWriter, int]] = {}
_writers_lock = threading.Lock()


def acquire_writer(data_dir: Path, settings: KeywordSettings, processor: str) -> KeywordWriter:
    """The process's writer for ``data_dir``; the first holder's writer settings apply.

    ``StoreLocked`` if another process writes the keyword indexes of ``data_dir``.
    """
    key = data_dir.resolve()
    with _writers_lock:
        writer, users = _writers.get(key, (None, 0))
        if writer is None:
            lock = take_writer_lock(key, "keyword", processor=processor)
            writer = KeywordWriter("keyword-writer", key, settings, lock)
        _writers[key] = (writer, users + 1)
        return writer


async def release_writer(writer: KeywordWriter) -> None:
    with _writers_lock:
        _, users = _writers[writer.data_dir]
        if users > 1:
            _writers[writer.data_dir] = (writer, users - 1)
            return
        del _writers[writer.data_dir]
    await writer.close()
