"""The chunker: a document in, its chunks embedded and written to every store.

A document replaces its earlier version: the stores first drop the
document's chunks, then take the new ones, so a shorter new version leaves
no stale chunks behind. If any store fails to take the chunks, the document
is removed from every store again before the error is reported: no store is
left holding a partial or different chunk set.
"""

from __future__ import annotations

import asyncio
import logging

from processors.runtime.client import RequestClient
from processors.runtime.clients import EmbedClient, RemoteError
from processors.runtime.processor import Processor, RequestContext
from schema import BadRequest, DeleteDocument, Document, EmbeddedChunks, IngestResult

from .chunking import chunk_document
from .settings import ChunkerSettings

log = logging.getLogger(__name__)


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
        s = self.settings
        results = await _call_all(
            self.client, s.delete_topics, DeleteDocument(document_id=document_id, collection=collection), s.call_timeout_s
        )
        return max((r.count for r in results), default=0)


class ChunkerProcessor(_Calls):
    request_type = Document
    response_type = IngestResult
    Settings = ChunkerSettings

    async def handle(self, doc: Document, context: RequestContext) -> IngestResult:
        s = self.settings
        if not doc.document_id.strip():
            raise BadRequest("document_id is empty")
        if len(doc.text) > s.max_document_chars:
            raise BadRequest(f"document {doc.document_id!r} has {len(doc.text)} characters; at most {s.max_document_chars}")
        chunks = chunk_document(doc, s.chunk_size, s.chunk_overlap)
        if not chunks:
            raise BadRequest(f"document {doc.document_id!r} has no text")
        embed = EmbedClient(self.client, topic=s.embed_topic, timeout=s.call_timeout_s)
        batches = [chunks[i : i + s.embed_batch] for i in range(0, len(chunks), s.embed_batch)]
        vectors = [v for vs in await asyncio.gather(*(embed.embed([c.text for c in b]) for b in batches)) for v in vs]
        await self.delete_everywhere(doc.document_id, doc.collection)
        try:
            await _call_all(self.client, s.store_topics, EmbeddedChunks(chunks=chunks, vectors=vectors), s.call_timeout_s)
        except Exception:
            log.warning("storing %s failed; removing it from every store", doc.document_id)
            await self.delete_everywhere(doc.document_id, doc.collection)
            raise
        return IngestResult(count=len(chunks))


class DocumentDeleteProcessor(_Calls):
    request_type = DeleteDocument
    response_type = IngestResult
    Settings = ChunkerSettings

    async def handle(self, request: DeleteDocument, context: RequestContext) -> IngestResult:
        return IngestResult(count=await self.delete_everywhere(request.document_id, request.collection))



