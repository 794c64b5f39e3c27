"""What the gateway asks of the pipeline, over the bus: typed clients on one ``RequestClient``.

Storing a document goes through the ingestion layer (``processors/ingestion``), as ``ragbus
ingest`` does: a large upload in parts, on a client of its own that does not resend (loads are slow).

Whether a collection holds anything is documents-query's to say, as for ``ragbus collections``;
the gateway asks only when an answer was drawn from nothing, and a yes counts for
``collection_check_s``, so a question answered from a collection costs no extra round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from config.settings import GatewaySettings
from processors.bus.base import BusError
from processors.ingestion import DocumentSource, Sent, send_document
from processors.runtime.request_client import RequestClient, RequestTimeout
from processors.runtime.status import statuses
from processors.runtime.typed_clients import DocumentRagClient, RemoteError
from schema import (
    DeleteDocument,
    DocumentList,
    DocumentRagPiece,
    DocumentRagRequest,
    DocumentRagResponse,
    IngestResult,
    KgQueryRequest,
    KgQueryResponse,
    ListDocuments,
)
from schema import topics as t
from schema.http import PipelineStatus

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 10.0  # at most, for the questions the gateway asks for itself (readiness, collections)


class BusPipeline:
    def __init__(
        self,
        client: RequestClient,
        *,
        timeout_s: float,
        store_timeout_s: float,
        store_client: RequestClient | None = None,
        ready_check_s: float = GatewaySettings().ready_check_s,
        collection_check_s: float = GatewaySettings().collection_check_s,
        wiring: list[tuple[str, str, str]] | None = None,
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.store_timeout_s = store_timeout_s
        self.store_client = store_client or client
        self.rag = DocumentRagClient(client, timeout=timeout_s)
        self.ready_check_s = ready_check_s
        self._ready_until = 0.0
        self.collection_check_s = collection_check_s
        self._holding_until: dict[str, float] = {}  # collection -> until when its yes counts
        self.wiring = wiring  # (processor, topic, group) of what ``status`` shows

    async def status(self) -> PipelineStatus:
        """Every processor topic of the wiring: its group's members, what waits, its dead letters."""
        if self.wiring is None:
            raise RuntimeError("this gateway was started without the wiring, so it cannot show the pipeline's status")
        return await statuses(self.client.bus, self.wiring)

    async def ask(self, r: DocumentRagRequest) -> DocumentRagResponse:
        return await self.rag.ask(r.query, mode=r.mode, at_time=r.at_time, doc_limit=r.doc_limit,
                                  collection=r.collection, fusion=r.fusion, as_of=r.as_of, answer=r.answer,
                                  history=r.history, must_see=r.must_see)

    def ask_stream(self, r: DocumentRagRequest) -> AsyncIterator[DocumentRagPiece]:
        return self.rag.ask_stream(r.query, mode=r.mode, at_time=r.at_time, doc_limit=r.doc_limit,
                                   collection=r.collection, as_of=r.as_of, history=r.history,
                                   answer_pieces=r.answer_pieces, must_see=r.must_see)

    async def documents(self, request: ListDocuments) -> DocumentList:
        """A page of a collection's documents, or (``collections``) the collections, from documents-query."""
        r = await self.client.request(t.DOCUMENTS_QUERY, request, DocumentList, timeout=self.timeout_s)
        if r.error is not None:
            raise RemoteError(t.DOCUMENTS_QUERY, r.error)
        return r

    async def kg_query(self, request: KgQueryRequest) -> KgQueryResponse:
        r = await self.client.request(t.KG_QUERY, request, KgQueryResponse, timeout=self.timeout_s)
        if r.error is not None:
            raise RemoteError(t.KG_QUERY, r.error)
        return r

    async def store(self, document: DocumentSource) -> Sent:
        """The chunks stored (or held already, when unchanged) and, with stores from the log, where it holds
        them; raises ``DocumentRejected`` for document-load's error answer, else what stopped the sending."""
        return await send_document(self.store_client, document, timeout=self.store_timeout_s)

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
                                      timeout=min(self.timeout_s, PROBE_TIMEOUT_S))
        if r.error is None or r.error.type != "BadRequest":  # any other answer: not the orchestrator we know
            raise RuntimeError(f"document-rag answered the readiness probe unexpectedly: {r.error}")
        self._ready_until = time.monotonic() + self.ready_check_s

    async def holds(self, collection: str) -> bool | None:
        """Whether ``collection`` holds documents or a graph, as documents-query lists the collections;
        None when it cannot say (not served, failed): then the pipeline's answer stands as it is.

        Only a yes is remembered: a collection filled a moment ago is found at once."""
        if time.monotonic() < self._holding_until.get(collection, 0.0):
            return True
        request = ListDocuments(collection=collection, collections=True)
        try:
            found = await self.client.request(t.DOCUMENTS_QUERY, request, DocumentList,
                                              timeout=min(self.timeout_s, PROBE_TIMEOUT_S))
        except (RequestTimeout, BusError) as exc:
            log.warning("gateway: documents-query cannot say which collections hold anything: %s", exc)
            return None
        if found.error is not None:
            log.warning("gateway: documents-query failed to list the collections: %s", found.error)
            return None
        if collection not in found.collections:
            return False
        self._holding_until[collection] = time.monotonic() + self.collection_check_s
        return True
