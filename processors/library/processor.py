"""The library processors: document-record writes what each collection holds, documents-query lists it.

- ``DocumentRecordProcessor``: ``RecordDocument`` from ``document-record`` -> applied, logged,
  fsynced -> ``IngestResult(count)`` (1 if it changed the library). Sent by document-load: a
  document once every store holds it whole, a removal when it leaves them. One per data dir:
  it holds the data dir's documents writer lock from start to close.
- ``DocumentsQueryProcessor``: ``ListDocuments`` -> ``DocumentList``: a collection's documents a
  page at a time, or the data dir's collections. Any number of replicas; each catches up with
  the log before answering.

The files are small (a record per document stored or removed), so both work on the event loop.
"""

from __future__ import annotations

from ragbus.config.settings import data_dir
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema import DocumentList, IngestResult, ListDocuments, RecordDocument, check_collection
from ragbus.schema.changelog import FILE_WRITES, RECORD, document_order, record_key, token
from ragbus.schema.topics import DOCUMENTS_LOG
from ragbus.stores.layout import collections
from ragbus.stores.library import Libraries, dated
from ragbus.stores.seen import append_change, wait_seen

from .settings import LibrarySettings


class _LibraryProcessor(Processor):
    Settings = LibrarySettings
    settings: LibrarySettings
    writer = False

    def __init__(self, name: str, settings: LibrarySettings) -> None:
        super().__init__(name, settings)
        self.data_dir = data_dir(settings.data_dir)
        # From the log, a replica's documents-replica writes the libraries: a writer here only appends.
        self.libraries = Libraries(self.data_dir, writer=self.writer and not settings.changelog)

    async def start(self) -> None:
        self.libraries.open(self.name)

    async def close(self) -> None:
        self.libraries.close()


class DocumentRecordProcessor(_LibraryProcessor):
    request_type = RecordDocument
    response_type = IngestResult
    writer = True

    async def handle(self, request: RecordDocument, context: RequestContext) -> IngestResult:
        check_collection(request.document.collection)
        if self.settings.changelog:
            return await self._append(dated(request))
        count, length = self.libraries.record(request)
        if not count:
            return IngestResult(count=0)  # nothing to remove: nothing for a read to see
        return IngestResult(count=count, seen=[token(FILE_WRITES, str(length))])

    async def _append(self, request: RecordDocument) -> IngestResult:
        """The record appended to the log: every replica's library applies it the same way."""
        doc = request.document
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
        library = self.libraries.get(check_collection(request.collection))
        documents, more = library.page(
            ids=request.document_ids, prefix=request.id_prefix, after=request.after,
            limit=min(request.limit, self.settings.max_limit),
        )
        return DocumentList(documents=documents, more=more)
