"""What the gateway asks of the pipeline, over the bus: typed clients on one ``RequestClient``.

Storing a document is injected (``store_document``): a large upload goes in parts, which
the ingestion code of the command line knows how to cut, and a lower layer must not import.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

from processors.runtime.client import RequestClient
from processors.runtime.clients import DocumentRagClient, RemoteError
from schema import (
    DeleteDocument,
    Document,
    DocumentRagPiece,
    DocumentRagRequest,
    DocumentRagResponse,
    IngestResult,
    KgQueryRequest,
    KgQueryResponse,
)
from schema import topics as t


class BusPipeline:
    def __init__(
        self,
        client: RequestClient,
        *,
        timeout_s: float,
        store_timeout_s: float,
        store_document: Callable[[Document], Awaitable[int]],
        ready_check_s: float = 5.0,
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.store_timeout_s = store_timeout_s
        self.store_document = store_document
        self.rag = DocumentRagClient(client, timeout=timeout_s)
        self.ready_check_s = ready_check_s
        self._ready_until = 0.0

    async def ask(self, r: DocumentRagRequest) -> DocumentRagResponse:
        return await self.rag.ask(r.query, mode=r.mode, at_time=r.at_time, doc_limit=r.doc_limit,
                                  collection=r.collection)

    def ask_stream(self, r: DocumentRagRequest) -> AsyncIterator[DocumentRagPiece]:
        return self.rag.ask_stream(r.query, mode=r.mode, at_time=r.at_time, doc_limit=r.doc_limit,
                                   collection=r.collection)

    async def kg_query(self, request: KgQueryRequest) -> KgQueryResponse:
        r = await self.client.request(t.KG_QUERY, request, KgQueryResponse, timeout=self.timeout_s)
        if r.error is not None:
            raise RemoteError(t.KG_QUERY, r.error)
        return r

    async def store(self, document: Document) -> int:
        """The number of chunks stored; raises as ``ingest`` reports a failed document."""
        return await self.store_document(document)

    async def delete(self, document_id: str, collection: str) -> IngestResult:
        request = DeleteDocument(document_id=document_id, collection=collection)
        r = await self.client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=self.store_timeout_s)
        if r.error is not None:
            raise RemoteError(t.DOCUMENT_DELETE, r.error)
        return r

    async def ready(self) -> None:
        """Return once document-rag answers (an answer counts for ``ready_check_s``); raises if it does not.

        The probe is an empty question: document-rag refuses it at once, before any retrieval or
        model call, so a probe every few seconds (a load balancer's) costs the pipeline nothing.
        """
        if time.monotonic() < self._ready_until:
            return
        r = await self.client.request(t.DOCUMENT_RAG, DocumentRagRequest(query=""), DocumentRagResponse,
                                      timeout=min(self.timeout_s, 10.0))
        if r.error is None or r.error.type != "BadRequest":  # any other answer: not the orchestrator we know
            raise RuntimeError(f"document-rag answered the readiness probe unexpectedly: {r.error}")
        self._ready_until = time.monotonic() + self.ready_check_s
