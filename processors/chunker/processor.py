"""The chunker: a document (or one part of a large one) in, its chunks embedded and written to every store.

A document replaces its earlier version: its first part (the whole of a
document that fits one message) has the stores drop the document's chunks
before they take the new ones, so a shorter new version leaves no stale
chunks behind; later parts append (``schema/ingest.py`` has the protocol).
If a store fails to take the chunks, or any later part fails, the document
is removed from every store again before the error is reported: no store is
left holding a partial or different chunk set. An embedding failure of the
first part leaves the earlier version as it was.

The library (processors/library) is kept in step: a document stored whole is
recorded (with the sender's content hash), one removed is struck off, and a
part 0 whose hash, chunk size and overlap the library holds already is
answered ``unchanged`` before anything is embedded or stored. document-delete
also has the graph retract the document's facts (``retract_topic``).

Every call fits the bus: embed requests and store writes are packed into
messages within ``max_message_bytes`` (less room for headers), however many
chunks a part has, and only ``embed_concurrency`` embed requests are in
flight at once, so none waits in the embedder's queue past its time-out.
"""

from __future__ import annotations

import asyncio
import logging

from processors.runtime.client import RequestClient
from processors.runtime.clients import EmbedClient, RemoteError
from processors.runtime.processor import Processor, RequestContext
from processors.runtime.sizing import body_budget, pack
from schema import (
    BadRequest,
    Chunk,
    DeleteDocument,
    Document,
    DocumentInfo,
    DocumentList,
    EmbeddedChunks,
    IngestResult,
    ListDocuments,
    LoadTriples,
    RecordDocument,
    encode,
)

from .chunking import chunk_part
from .settings import ChunkerSettings

log = logging.getLogger(__name__)

# msgpack's prefix of a string or an array: at most 5 bytes.
_PREFIX = 5


async def _call_all(client: RequestClient, topics: list[str], message, timeout: float) -> list[IngestResult]:
    results = await asyncio.gather(
        *(client.request(topic, message, IngestResult, timeout=timeout) for topic in topics)
    )
    for topic, r in zip(topics, results):
        if r.error is not None:
            raise RemoteError(topic, r.error)
    return results


class _Calls(Processor):
    settings: ChunkerSettings

    async def start(self) -> None:
        self.client = await RequestClient(self.bus, name=self.name, timeout_s=self.settings.call_timeout_s).start()

    async def close(self) -> None:
        await self.client.close()

    async def delete_everywhere(self, document_id: str, collection: str) -> int:
        """Remove the document from every chunk store, then from the library; the chunks removed."""
        s = self.settings
        results = await _call_all(
            self.client, s.delete_topics, DeleteDocument(document_id=document_id, collection=collection), s.call_timeout_s
        )
        await self.record(DocumentInfo(document_id=document_id, collection=collection), removed=True)
        return max((r.count for r in results), default=0)

    async def record(self, document: DocumentInfo, *, removed: bool = False) -> None:
        if self.settings.record_topic:
            await _call_all(self.client, [self.settings.record_topic], RecordDocument(document=document, removed=removed),
                            self.settings.call_timeout_s)

    async def held(self, doc: Document) -> DocumentInfo | None:
        """The library's entry of ``doc`` if it holds it with the same content hash."""
        s = self.settings
        if not (doc.content_hash and s.documents_topic):
            return None
        request = ListDocuments(collection=doc.collection, document_ids=[doc.document_id], limit=1)
        found = await self.client.request(s.documents_topic, request, DocumentList, timeout=s.call_timeout_s)
        if found.error is not None:
            raise RemoteError(s.documents_topic, found.error)
        same = [d for d in found.documents if (d.document_id, d.content_hash, d.chunking) ==
                (doc.document_id, doc.content_hash, self.chunking)]
        return same[0] if same else None

    @property
    def chunking(self) -> str:
        return f"{self.settings.chunk_size}/{self.settings.chunk_overlap}"


class ChunkerProcessor(_Calls):
    request_type = Document
    response_type = IngestResult
    Settings = ChunkerSettings

    async def handle(self, doc: Document, context: RequestContext) -> IngestResult:
        s = self.settings
        if not doc.document_id.strip():
            raise BadRequest("document_id is empty")
        if doc.part == 0 and doc.first_position != 0:
            raise BadRequest(f"part 0 of document {doc.document_id!r} must start at position 0")
        if doc.part == 0 and (held := await self.held(doc)) is not None:
            return IngestResult(count=held.chunks, unchanged=1)  # every store holds this content: nothing to do
        chunks, resume_at = chunk_part(doc, s.chunk_size, s.chunk_overlap)
        if not doc.last and resume_at == 0:
            raise BadRequest(
                f"part {doc.part} of document {doc.document_id!r} ({len(doc.text)} characters) is too short to "
                f"hold a whole chunk of chunk_size={s.chunk_size}: parts must be larger (raise max_message_bytes)"
            )
        if doc.part == 0 and doc.last and not chunks:
            raise BadRequest(f"document {doc.document_id!r} has no text")
        opened = doc.part > 0  # the stores hold earlier parts of this version
        try:
            vectors = await self._embed(chunks)
            batches = self._store_batches(chunks, vectors)
            if doc.part == 0:
                await self.delete_everywhere(doc.document_id, doc.collection)
                opened = True
            for batch in batches:
                await _call_all(self.client, s.store_topics, batch, s.call_timeout_s)
            if doc.last:  # stored whole: the library lists it from now on
                await self.record(DocumentInfo(
                    document_id=doc.document_id, title=doc.title, source=doc.source, collection=doc.collection,
                    chunks=doc.first_position + len(chunks), content_hash=doc.content_hash, chunking=self.chunking,
                ))
        except Exception:
            if opened:
                log.warning("storing %s (part %d) failed; removing it from every store", doc.document_id, doc.part)
                await self.delete_everywhere(doc.document_id, doc.collection)
            raise
        return IngestResult(count=len(chunks), resume_at=resume_at)

    async def _embed(self, chunks: list[Chunk]) -> list[list[float]]:
        """The chunks' vectors, asked in batches of at most ``embed_batch`` texts that each fit a message."""
        s = self.settings
        embed = EmbedClient(self.client, topic=s.embed_topic, timeout=s.call_timeout_s)
        sizes = [len(c.text.encode()) + _PREFIX for c in chunks]
        batches = list(pack(sizes, body_budget(self.bus.max_message_bytes), overhead=64, max_items=s.embed_batch))
        slots = asyncio.Semaphore(s.embed_concurrency)

        async def one(batch: range) -> list[list[float]]:
            async with slots:
                return await embed.embed(chunks[i].text for i in batch)

        return [v for vs in await asyncio.gather(*(one(b) for b in batches)) for v in vs]

    def _store_batches(self, chunks: list[Chunk], vectors: list[list[float]]) -> list[EmbeddedChunks]:
        """The store writes of a part, each within the bus's message size."""
        if len(vectors) != len(chunks):
            raise ValueError(f"embed returned {len(vectors)} vectors for {len(chunks)} chunks")
        budget = body_budget(self.bus.max_message_bytes)
        sizes = [len(encode(c)) + len(encode(v)) for c, v in zip(chunks, vectors)]
        overhead = len(encode(EmbeddedChunks(chunks=[], vectors=[]))) + 2 * _PREFIX
        try:
            runs = list(pack(sizes, budget, overhead=overhead))
        except ValueError:
            raise ValueError(
                f"a chunk with its vector takes up to {max(sizes)} bytes, more than a store write may hold on a bus "
                f"with max_message_bytes={self.bus.max_message_bytes}: lower chunk_size or raise max_message_bytes"
            ) from None
        return [EmbeddedChunks(chunks=chunks[r.start : r.stop], vectors=vectors[r.start : r.stop]) for r in runs]


class DocumentDeleteProcessor(_Calls):
    """A document out of every store: its chunks from each chunk store, its facts from the graph.

    ``count`` is the chunks removed, ``retracted`` the graph facts no longer believed. Every step
    is idempotent, so after one failed (an error answer) the next delete finishes the job.
    """

    request_type = DeleteDocument
    response_type = IngestResult
    Settings = ChunkerSettings

    async def handle(self, request: DeleteDocument, context: RequestContext) -> IngestResult:
        s = self.settings
        chunks = self.delete_everywhere(request.document_id, request.collection)
        if not s.retract_topic:
            return IngestResult(count=await chunks)
        retraction = LoadTriples(retract_sources=[request.document_id], collection=request.collection)
        retract = _call_all(self.client, [s.retract_topic], retraction, s.call_timeout_s)
        count, (retracted,) = await asyncio.gather(chunks, retract)
        return IngestResult(count=count, retracted=retracted.retracted)
