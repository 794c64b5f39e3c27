"""The library processors: document-record writes what each collection holds, documents-query lists it.

- ``DocumentRecordProcessor``: ``RecordDocument`` from ``document-record`` -> applied, logged,
  fsynced -> ``IngestResult(count)`` (1 if it changed the library). Sent by document-load: a
  document once every store holds it whole, a removal when it leaves them. One per data dir:
  it holds the data dir's documents writer lock from start to close.
- ``DocumentsQueryProcessor``: ``ListDocuments`` -> ``DocumentList``: a collection's documents a
  page at a time, or the data dir's collections. Any number of replicas; each catches up with
  the log before answering.

The logs are small (a line per document stored or removed), so both work on the event loop.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from ragbus.config.settings import data_dir
from ragbus.stores.seen import append_change, wait_seen
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.stores.writer_lock import WriterLock, take_writer_lock
from ragbus.schema import DocumentList, IngestResult, ListDocuments, RecordDocument, check_collection
from ragbus.schema.changelog import FILE_WRITES, RECORD, document_order, record_key, token
from ragbus.schema.times import iso
from ragbus.schema.topics import DOCUMENTS_LOG

from .settings import LibrarySettings
from ragbus.stores.library import Library
from ragbus.stores.layout import collections, library_path


class _LibraryProcessor(Processor):
    Settings = LibrarySettings
    settings: LibrarySettings
    writer = False

    def __init__(self, name: str, settings: LibrarySettings) -> None:
        super().__init__(name, settings)
        self.data_dir = data_dir(settings.data_dir)
        self.libraries: dict[str, Library] = {}
        self._lock: WriterLock | None = None

    async def start(self) -> None:
        if self.writer and not self.settings.changelog:
            self._lock = take_writer_lock(self.data_dir, "documents", processor=self.name)

    async def close(self) -> None:
        for library in self.libraries.values():
            library.close()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()

    def library(self, collection: str) -> Library:
        library = self.libraries.get(collection)
        if library is None:
            library = self.libraries[collection] = Library(library_path(self.data_dir, collection))
            if self.writer:
                library.open_for_append()
        if not self.writer:
            library.catch_up()
        return library


class DocumentRecordProcessor(_LibraryProcessor):
    request_type = RecordDocument
    response_type = IngestResult
    writer = True

    async def handle(self, request: RecordDocument, context: RequestContext) -> IngestResult:
        doc = request.document
        check_collection(doc.collection)
        if self.settings.changelog:
            return await self._append(request)
        library = self.library(doc.collection)
        if request.removed and doc.document_id not in library.documents:
            return IngestResult(count=0)  # nothing to remove: the log stays as it is
        if not request.removed and doc.ingested_at is None:
            request = msgspec.structs.replace(
                request, document=msgspec.structs.replace(doc, ingested_at=iso(datetime.now(UTC)))
            )
        library.append(request)  # logged before applied: what a reader replays is what this writer holds
        library.apply(request)
        return IngestResult(count=1, seen=[token(FILE_WRITES, str(library.offset))])

    async def _append(self, request: RecordDocument) -> IngestResult:
        """The record, dated here, appended to the log: every replica's library applies it the same way."""
        doc = request.document
        if not request.removed and doc.ingested_at is None:
            request = msgspec.structs.replace(
                request, document=msgspec.structs.replace(doc, ingested_at=iso(datetime.now(UTC)))
            )
        topic = self.settings.log_topic or DOCUMENTS_LOG
        position = await append_change(self.bus, topic, RECORD, request,
                                       key=record_key(doc.collection, doc.document_id),
                                       order_key=document_order(doc.collection, doc.document_id))
        return IngestResult(count=1, seen=[token(topic, position)])


class DocumentsQueryProcessor(_LibraryProcessor):
    request_type = ListDocuments
    response_type = DocumentList

    async def handle(self, request: ListDocuments, context: RequestContext) -> DocumentList:
        s = self.settings
        await wait_seen(request.must_see, self.data_dir, s.log_topic or DOCUMENTS_LOG, s.fresh_wait_s,
                        from_log=s.changelog)
        if request.collections:
            return DocumentList(collections=collections(self.data_dir))
        library = self.library(check_collection(request.collection))
        documents, more = library.page(
            ids=request.document_ids, prefix=request.id_prefix, after=request.after,
            limit=min(request.limit, self.settings.max_limit),
        )
        return DocumentList(documents=documents, more=more)
