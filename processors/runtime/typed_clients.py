"""Typed clients: one small class per request topic, on top of ``RequestClient``.

They return plain values and raise ``RemoteError`` when the processor
answered with an error, so callers (the orchestrator first) never look at
envelopes or response Structs. The ``*_stream`` calls yield the pieces of a
streamed answer (``ragbus.schema.topics.STREAMS``) and raise ``RemoteError`` at the
piece that carries an error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextvars import ContextVar

from ragbus.schema import (
    DEFAULT_COLLECTION,
    ChunkMatch,
    DocEmbeddingsRequest,
    DocEmbeddingsResponse,
    DocumentRagPiece,
    DocumentRagRequest,
    DocumentRagResponse,
    EmbedRequest,
    EmbedResponse,
    Error,
    FetchChunkRequest,
    FetchChunkResponse,
    KeywordQueryRequest,
    KeywordQueryResponse,
    KeywordStatistics,
    KgQueryRequest,
    KgQueryResponse,
    PromptPiece,
    PromptRequest,
    PromptResult,
    Turn,
)
from ragbus.schema import topics as t
from ragbus.schema.errors import RETRIABLE_TYPES, RagbusError

from .request_client import RequestClient

# The writes the request being handled must see (``DocumentRagRequest.must_see``): set by document-rag while
# it handles one, so every read it asks for carries them, as the trace context travels with every call.
handling_must_see: ContextVar[tuple[str, ...]] = ContextVar("handling_must_see", default=())


class RemoteError(RagbusError):
    """The processor answered, with an error: ``error``, its type and message as they came on the wire.
    ``retriable`` by that type (``RETRIABLE_TYPES``): a time-out, or a replica behind a write it must see;
    ``caller``: the request itself is wrong (``Error.caller``), so sending it again fails the same way."""

    def __init__(self, topic: str, error: Error) -> None:
        super().__init__(f"{topic}: {error.type}: {error.message}")
        self.topic = topic
        self.error = error
        self.retriable = error.type in RETRIABLE_TYPES
        self.caller = error.caller


def _check(topic: str, response):
    if response.error is not None:
        raise RemoteError(topic, response.error)
    return response


class _Typed:
    topic: str

    def __init__(self, client: RequestClient, *, topic: str | None = None, timeout: float | None = None) -> None:
        self.client = client
        self.topic = topic or self.topic
        self.timeout = timeout


class EmbedClient(_Typed):
    topic = t.EMBED

    async def embed(self, texts: Iterable[str]) -> list[list[float]]:
        r = await self.client.request(self.topic, EmbedRequest(texts=list(texts)), EmbedResponse, timeout=self.timeout)
        return _check(self.topic, r).vectors


class DocEmbeddingsClient(_Typed):
    topic = t.DOC_EMBEDDINGS_QUERY

    async def query(
        self, vectors: Sequence[Sequence[float]], limit: int = 10, collection: str = DEFAULT_COLLECTION,
        must_see: Sequence[str] = (),
    ) -> list[ChunkMatch]:
        request = DocEmbeddingsRequest(vectors=[list(v) for v in vectors], limit=limit, collection=collection,
                                       must_see=list(must_see or handling_must_see.get()))
        r = await self.client.request(self.topic, request, DocEmbeddingsResponse, timeout=self.timeout)
        return _check(self.topic, r).matches


class FetchChunkClient(_Typed):
    topic = t.FETCH_CHUNK

    async def fetch(self, chunk_ids: Sequence[str], collection: str = DEFAULT_COLLECTION,
                    must_see: Sequence[str] = ()) -> list[ChunkMatch]:
        request = FetchChunkRequest(chunk_ids=list(chunk_ids), collection=collection,
                                    must_see=list(must_see or handling_must_see.get()))
        r = await self.client.request(self.topic, request, FetchChunkResponse, timeout=self.timeout)
        return _check(self.topic, r).chunks

    async def __call__(self, chunk_id: str, collection: str = DEFAULT_COLLECTION) -> str:
        """The text of one chunk: the ``fetch_chunk`` callable the orchestrator takes."""
        chunks = await self.fetch([chunk_id], collection)
        if not chunks or chunks[0].text is None:
            raise RemoteError(self.topic, Error("NotFound", f"chunk {chunk_id!r} not found"))
        return chunks[0].text


class KeywordClient(_Typed):
    topic = t.KEYWORD_QUERY

    async def query(self, *, query: str, limit: int = 10, collection: str = DEFAULT_COLLECTION,
                    must_see: Sequence[str] = (), statistics: KeywordStatistics | None = None) -> list[ChunkMatch]:
        """The best ``limit`` chunks by BM25; ``statistics``: scored with these (a sharded collection's)."""
        request = KeywordQueryRequest(query=query, limit=limit, collection=collection, statistics=statistics,
                                      must_see=list(must_see or handling_must_see.get()))
        r = await self.client.request(self.topic, request, KeywordQueryResponse, timeout=self.timeout)
        return _check(self.topic, r).matches

    async def statistics(self, *, query: str, collection: str = DEFAULT_COLLECTION,
                         must_see: Sequence[str] = ()) -> KeywordStatistics:
        """The index's BM25 statistics of the terms of ``query``, no search."""
        request = KeywordQueryRequest(query=query, collection=collection, statistics_only=True,
                                      must_see=list(must_see or handling_must_see.get()))
        r = await self.client.request(self.topic, request, KeywordQueryResponse, timeout=self.timeout)
        return _check(self.topic, r).statistics or KeywordStatistics()


class KgClient(_Typed):
    topic = t.KG_QUERY

    async def query(
        self,
        question: str,
        *,
        at_time: str | None = None,
        as_of: str | None = None,
        limit: int = 8,
        collection: str = DEFAULT_COLLECTION,
        answering: bool = False,
        must_see: Sequence[str] = (),
    ) -> KgQueryResponse:
        request = KgQueryRequest(question=question, at_time=at_time, as_of=as_of, limit=limit, collection=collection,
                                 answering=answering, must_see=list(must_see or handling_must_see.get()))
        r = await self.client.request(self.topic, request, KgQueryResponse, timeout=self.timeout)
        return _check(self.topic, r)


class PromptClient(_Typed):
    topic = t.PROMPT

    async def prompt(self, template_id: str, variables: dict[str, str | list[str]] | None = None) -> PromptResult:
        request = PromptRequest(template_id=template_id, variables=dict(variables or {}))
        r = await self.client.request(self.topic, request, PromptResult, timeout=self.timeout)
        return _check(self.topic, r)

    async def stream(
        self, template_id: str, variables: dict[str, str | list[str]] | None = None
    ) -> AsyncIterator[PromptPiece]:
        """The answer's pieces of text, then a piece with the whole ``PromptResult``."""
        request = PromptRequest(template_id=template_id, variables=dict(variables or {}))
        async for piece in self.client.stream(self.topic, request, PromptPiece, timeout=self.timeout):
            yield _check(self.topic, piece)

    async def condense(self, query: str, history: Sequence[str]) -> str:
        """``query`` made a standalone question from ``history`` (``user: ...`` / ``assistant: ...`` lines)."""
        result = await self.prompt("condense-question", {"query": query, "history": list(history)})
        return result.text.strip() or query

    def document_prompt_stream(self, **kwargs) -> AsyncIterator[PromptPiece]:
        """``document_prompt`` (same arguments), streamed."""
        return self.stream("document-prompt", _document_variables(**kwargs))

    async def document_prompt(
        self,
        *,
        query: str,
        documents: Sequence[str],
        facts: Sequence[str] = (),
        at_time: str | None = None,
        document_ids: Sequence[str] | None = None,
        snapshot_header: str | None = None,
    ) -> PromptResult:
        """An answer to ``query`` from ``documents`` and ``facts``, each cited.

        ``document_ids`` (parallel to ``documents``) are the citations of the
        documents; without them documents are cited ``[1]``, ``[2]``... by
        position. ``snapshot_header`` replaces the default header line that
        precedes the facts when ``at_time`` is given. Optional variables are
        sent only when given.
        """
        variables = _document_variables(
            query=query, documents=documents, facts=facts, at_time=at_time, document_ids=document_ids,
            snapshot_header=snapshot_header,
        )
        return await self.prompt("document-prompt", variables)


def _document_variables(
    *,
    query: str,
    documents: Sequence[str],
    facts: Sequence[str] = (),
    at_time: str | None = None,
    document_ids: Sequence[str] | None = None,
    snapshot_header: str | None = None,
) -> dict[str, str | list[str]]:
    variables: dict[str, str | list[str]] = {"query": query, "documents": list(documents), "facts": list(facts)}
    if at_time is not None:
        variables["at_time"] = at_time
    if document_ids is not None:
        variables["document_ids"] = list(document_ids)
    if snapshot_header is not None:
        variables["snapshot_header"] = snapshot_header
    return variables


class DocumentRagClient(_Typed):
    """Publish a question to document-rag and await its answer: the Python client of ``ragbus ask``."""

    topic = t.DOCUMENT_RAG

    async def ask(
        self,
        query: str,
        *,
        mode: str | None = None,
        at_time: str | None = None,
        doc_limit: int | None = None,
        collection: str = DEFAULT_COLLECTION,
        fusion: str | None = None,
        as_of: str | None = None,
        answer: bool = True,
        history: Sequence[Turn] = (),
        must_see: Sequence[str] = (),
    ) -> DocumentRagResponse:
        """The answer (``answer=False``: the sources only); see ``DocumentRagRequest``."""
        request = DocumentRagRequest(query=query, mode=mode, at_time=at_time, doc_limit=doc_limit,
                                     collection=collection, fusion=fusion, as_of=as_of, answer=answer,
                                     history=list(history), must_see=list(must_see))
        r = await self.client.request(self.topic, request, DocumentRagResponse, timeout=self.timeout)
        return _check(self.topic, r)

    async def ask_stream(
        self,
        query: str,
        *,
        mode: str | None = None,
        at_time: str | None = None,
        doc_limit: int | None = None,
        collection: str = DEFAULT_COLLECTION,
        as_of: str | None = None,
        history: Sequence[Turn] = (),
        answer_pieces: bool = True,
        must_see: Sequence[str] = (),
    ) -> AsyncIterator[DocumentRagPiece]:
        """The answer as it is written: a ``sources`` piece, ``answer`` pieces (none with
        ``answer_pieces=False``), then the ``final`` one."""
        request = DocumentRagRequest(query=query, mode=mode, at_time=at_time, doc_limit=doc_limit,
                                     collection=collection, as_of=as_of, history=list(history),
                                     answer_pieces=answer_pieces, must_see=list(must_see))
        async for piece in self.client.stream(self.topic, request, DocumentRagPiece, timeout=self.timeout):
            yield _check(self.topic, piece)
