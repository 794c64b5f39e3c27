"""The document-rag processor: the thin bus wrapper around ``DocumentRag``.

It builds one ``DocumentRag`` in ``start()`` from typed clients on its own
``RequestClient``; the core holds no per-query state, so every request
shares it. A request's ``mode``, ``doc_limit``, ``at_time`` and
``collection`` go to ``DocumentRag.query``; bad input and failed sub-requests
become error responses (or degraded answers, see ``core.py``). An answer
drawn on no chunk and no fact asks documents-query whether the collection
holds anything (``processors/runtime/collection_check.py``): one that holds
nothing is answered with an ``EmptyCollection`` error, on every bus and face.
With ``shards`` > 0 the document stores' clients are sharded (``shards.py``): one client a
shard, on ``<topic>.shard-<k>``; that needs a bus whose log topics have partitions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ragbus.bus import LogTopicsUnsupported
from ragbus.config.settings import SettingsError, arguments_for
from ragbus.runtime.collection_check import CollectionCheck
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import (
    handling_must_see,
    DocEmbeddingsClient,
    EmbedClient,
    FetchChunkClient,
    KeywordClient,
    KgClient,
    PromptClient,
)
from ragbus.schema import BadRequest, DocumentRagPiece, DocumentRagRequest, DocumentRagResponse, check_collection
from ragbus.schema.shards import shard_partitions, shard_topic

from .core import Asked, DocumentRag, RagAnswer
from .settings import DocumentRagSettings
from .shards import PATH_SHARE, ShardedDocEmbeddings, ShardedFetch, ShardedKeywords


class DocumentRagProcessor(Processor[DocumentRagRequest, DocumentRagResponse]):
    request_type = DocumentRagRequest
    response_type = DocumentRagResponse
    piece_type = DocumentRagPiece
    Settings = DocumentRagSettings

    settings: DocumentRagSettings

    def __init__(self, name: str, settings: DocumentRagSettings) -> None:
        super().__init__(name, settings)
        self._client: RequestClient | None = None
        self._rag: DocumentRag | None = None
        self._holdings: CollectionCheck | None = None

    async def start(self) -> None:
        s = self.settings
        if s.shards:
            await self._check_shards()  # before anything is made that close() would have to undo
        self._client = client = await RequestClient(
            self.bus, name=self.name, timeout_s=s.call_timeout_s, resend_after_s=s.resend_after_s or None
        ).start()
        self._holdings = CollectionCheck(self.bus, name=f"{self.name}-collections", topic=s.documents_topic,
                                         timeout_s=s.call_timeout_s)
        stores = self._sharded(client) if s.shards else (
            DocEmbeddingsClient(client, topic=s.doc_embeddings_topic),
            FetchChunkClient(client, topic=s.fetch_chunk_topic),
            KeywordClient(client, topic=s.keyword_topic),
        )
        docs, fetch, keywords = stores
        self._rag = DocumentRag(
            PromptClient(client, topic=s.prompt_topic),
            EmbedClient(client, topic=s.embed_topic),
            docs,
            fetch,
            kw_index_client=keywords,
            kg_client=KgClient(client, topic=s.kg_topic) if s.use_graph else None,
            **arguments_for(DocumentRag, s),  # its tuning: retrieval_mode, the weights, the limits...
        )

    async def _check_shards(self) -> None:
        """Refuse to start when the bus cannot say which shard holds a document, or its log cannot be split."""
        s = self.settings
        try:
            partitions = await self.bus.log_partitions(s.log_topic)
        except LogTopicsUnsupported as exc:
            raise SettingsError(
                f"{self.name}: shards = {s.shards} needs a bus whose log topics have partitions (Kafka or "
                f"memory://), to tell which shard holds a document; {self.bus.url} has none ({exc}). "
                "Set [stores] shards = 0 on this bus"
            ) from None
        try:
            shard_partitions(0, s.shards, partitions)
        except ValueError as exc:
            raise SettingsError(f"{self.name}: {exc}") from None

    def _sharded(self, client: RequestClient) -> tuple[ShardedDocEmbeddings, ShardedFetch, ShardedKeywords]:
        """The document stores' clients over every shard: doc-embeddings-query, fetch-chunk, keyword-query."""
        s = self.settings
        shards = range(s.shards)
        return (
            ShardedDocEmbeddings([DocEmbeddingsClient(client, topic=shard_topic(s.doc_embeddings_topic, k))
                                  for k in shards], timeout_s=s.call_timeout_s),
            ShardedFetch([FetchChunkClient(client, topic=shard_topic(s.fetch_chunk_topic, k)) for k in shards],
                         self.bus, s.log_topic),
            ShardedKeywords([KeywordClient(client, topic=shard_topic(s.keyword_topic, k)) for k in shards],
                            timeout_s=s.path_timeout_s * PATH_SHARE),
        )

    async def close(self) -> None:
        if self._holdings is not None:
            holdings, self._holdings = self._holdings, None
            await holdings.close()
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def handle(self, request: DocumentRagRequest, context: RequestContext) -> DocumentRagResponse:
        seeing = handling_must_see.set(tuple(request.must_see))  # every read asked for carries them
        try:
            r = await self._checked(request).answer(request.query, Asked.of(request), answer=request.answer)
        finally:
            handling_must_see.reset(seeing)
        if not r.chunks and not r.facts:
            await self._must_hold(request)
        return _response(r)

    async def stream(self, request: DocumentRagRequest, context: RequestContext) -> AsyncIterator[DocumentRagPiece]:
        # Set for the rest of this delivery's task (a generator shares its caller's context): its reads carry them.
        handling_must_see.set(tuple(request.must_see))
        events = self._checked(request).answer_stream(request.query, Asked.of(request),
                                                      answer_pieces=request.answer_pieces)
        async for kind, value in events:
            if kind == "sources":
                if not value.chunks and not value.facts:
                    await self._must_hold(request)
                yield DocumentRagPiece(
                    kind=kind, chunks=value.chunks, facts=value.facts, rejected=value.rejected, paths=value.paths,
                    degraded=value.degraded, problems=value.problems, at_time=value.at_time, header=value.header,
                )
            elif kind == "answer":
                yield DocumentRagPiece(kind=kind, text=value)
            else:
                yield DocumentRagPiece(kind="final", response=_response(value))

    def is_final(self, piece: DocumentRagPiece) -> bool:
        return piece.response is not None

    async def _must_hold(self, request: DocumentRagRequest) -> None:
        """``EmptyCollection`` when the collection an answer drew nothing from holds nothing at all."""
        if self._holdings is not None:
            await self._holdings.require(request.collection, request.must_see)

    def _checked(self, request: DocumentRagRequest) -> DocumentRag:
        if self._rag is None:
            raise RuntimeError(f"{self.name} is not started")
        check_collection(request.collection)
        if request.doc_limit is not None and request.doc_limit > self.settings.max_doc_limit:
            raise BadRequest(f"doc_limit {request.doc_limit} is over max_doc_limit={self.settings.max_doc_limit}")
        return self._rag


def _response(r: RagAnswer) -> DocumentRagResponse:
    return DocumentRagResponse(
        answer=r.answer, chunks=r.chunks, cited=r.cited, facts=r.facts, rejected=r.rejected,
        at_time=r.at_time, header=r.header, paths=r.paths, degraded=r.degraded, problems=r.problems,
        timings_ms=r.timings_ms, standalone=r.standalone,
    )
