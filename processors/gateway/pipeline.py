"""What the gateway asks of the pipeline, over the bus: typed clients on one ``RequestClient``.

Storing a document goes through the ingestion layer (``processors/ingestion``), as ``ragbus
ingest`` does: a large upload in parts, on a client of its own that does not resend (loads are slow).
A question to a collection that holds nothing is refused by the pipeline itself (document-rag and
kg-query answer ``EmptyCollection``), as for every other client of the bus. A question longer than
document-rag's ``max_query_chars`` is refused here, before it is published, naming that limit: a
long enough one would otherwise be refused by the bus, for its message's bytes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

from ragbus.config.settings import GatewaySettings
from ragbus.bus import BusUnavailable
from ragbus.ingestion import DocumentSource, Sent, send_document
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.pipeline_status import statuses
from ragbus.runtime.typed_clients import DocumentRagClient, RemoteError
from ragbus.schema import (
    BadRequest,
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
from ragbus.schema import topics as t
from ragbus.schema.http import PipelineStatus

PROBE_TIMEOUT_S = 10.0  # at most, for the question the gateway asks for itself (readiness)


class QuestionTooLong(BadRequest):
    """A question over document-rag's ``max_query_chars``."""


def too_long(length: int, limit: int, what: str = "the question") -> str:
    """Why a question of ``length`` characters is refused: the limit, and the setting that sets it."""
    return (f"{what} is {length:,} characters, over the question limit of {limit:,} characters (document-rag's "
            "max_query_chars: [processors.document-rag] max_query_chars, "
            "or RAGBUS_PROCESSORS__DOCUMENT_RAG__MAX_QUERY_CHARS)")


class BusPipeline:
    def __init__(
        self,
        client: RequestClient,
        *,
        timeout_s: float,
        store_timeout_s: float,
        store_client: RequestClient | None = None,
        ready_check_s: float = GatewaySettings().ready_check_s,
        wiring: list[tuple[str, str, str]] | None = None,
        max_query_chars: int | None = None,
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.store_timeout_s = store_timeout_s
        self.store_client = store_client or client
        self.rag = DocumentRagClient(client, timeout=timeout_s)
        self.ready_check_s = ready_check_s
        self._ready_until = 0.0
        self.wiring = wiring  # (processor, topic, group) of what ``status`` shows
        self.max_query_chars = max_query_chars  # document-rag's, as configured; None: its answer says

    async def status(self) -> PipelineStatus:
        """Every processor topic of the wiring: its group's members, what waits, its dead letters."""
        if self.wiring is None:
            raise RuntimeError("this gateway was started without the wiring, so it cannot show the pipeline's status")
        return await statuses(self.client.bus, self.wiring)

    def check(self, question: str) -> None:
        """``QuestionTooLong`` for a question document-rag would refuse for its length."""
        if self.max_query_chars is not None and len(question) > self.max_query_chars:
            raise QuestionTooLong(too_long(len(question), self.max_query_chars))

    async def ask(self, r: DocumentRagRequest) -> DocumentRagResponse:
        self.check(r.query)
        return await self.rag.ask(r.query, mode=r.mode, at_time=r.at_time, doc_limit=r.doc_limit,
                                  collection=r.collection, fusion=r.fusion, as_of=r.as_of, answer=r.answer,
                                  history=r.history, must_see=r.must_see)

    async def ask_stream(self, r: DocumentRagRequest) -> AsyncIterator[DocumentRagPiece]:
        """The answer's pieces; a refusal (``check``, the pipeline's) is raised at the first."""
        self.check(r.query)
        pieces = cast(AsyncGenerator[DocumentRagPiece, None],  # an async generator, typed as its iterator
                      self.rag.ask_stream(r.query, mode=r.mode, at_time=r.at_time, doc_limit=r.doc_limit,
                                          collection=r.collection, as_of=r.as_of, history=r.history,
                                          answer_pieces=r.answer_pieces, must_see=r.must_see))
        async with contextlib.aclosing(pieces):  # a stream its reader leaves is closed at once
            async for piece in pieces:
                yield piece

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
        While the bus finds its broker unreachable, not ready at once, naming the broker (``BusUnavailable``).
        """
        problem = self.client.bus.unreachable()
        if problem is not None:
            raise BusUnavailable(problem)
        if time.monotonic() < self._ready_until:
            return
        r = await self.client.request(t.DOCUMENT_RAG, DocumentRagRequest(query=""), DocumentRagResponse,
                                      timeout=min(self.timeout_s, PROBE_TIMEOUT_S))
        if r.error is None or r.error.type != "BadRequest":  # any other answer: not the orchestrator we know
            raise RuntimeError(f"document-rag answered the readiness probe unexpectedly: {r.error}")
        self._ready_until = time.monotonic() + self.ready_check_s
