"""Synthetic documents written to the documents log as an ingestion host writes them, without embedding them.

``Writers`` calls the log's writers themselves (doc-embeddings-store, doc-embeddings-delete and
document-record with ``changelog = true``, in this process): each document is a staged run of its
chunks with their vectors, the switch to its version, and its record, with the writers' own keys and
order keys (``schema/changelog.py``). Used by ``scripts.bench_log_replica``,
``scripts.bench_log_compaction`` and ``scripts.bench_shards``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

import numpy as np

from ragbus.doc_embeddings import DocEmbeddingsDeleteProcessor, DocEmbeddingsSettings, DocEmbeddingsStoreProcessor
from ragbus.library import DocumentRecordProcessor, LibrarySettings
from ragbus.runtime.envelope import Envelope, new_traceparent
from ragbus.runtime.processor import RequestContext
from ragbus.schema import Chunk, DeleteDocument, DocumentInfo, EmbeddedChunks, RecordDocument, generation_of

WORDS = ["the", "statement", "block", "loop", "value", "name", "class", "method", "module", "scope", "function",
         "object", "list", "tuple", "string", "number", "index", "key", "set", "dict", "frame", "call", "return"]
DIMENSION = 384  # all-MiniLM-L6-v2's, the default embedder's


def request_context() -> RequestContext:
    """The context of a request handled in this process, as if it had come over the bus."""
    envelope = Envelope(request_id=uuid.uuid4().hex, reply_to=None, attempt=1, deadline_ms=None,
                        traceparent=new_traceparent())
    return RequestContext(envelope=envelope, topic="bench", delivery_attempt=1)


def rng_vectors(rng: random.Random, n: int, dimension: int = DIMENSION) -> list[list[float]]:
    """``n`` random unit vectors, drawn from ``rng``."""
    m = np.random.default_rng(rng.randrange(2**32)).standard_normal((n, dimension)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m.tolist()


class Writers:
    """The log's writers, as an ingestion host runs them (log mode), called directly."""

    def __init__(self, bus, log: str) -> None:
        self.store = DocEmbeddingsStoreProcessor("bench-store", DocEmbeddingsSettings(changelog=True, log_topic=log))
        self.switch = DocEmbeddingsDeleteProcessor("bench-switch", DocEmbeddingsSettings(changelog=True,
                                                                                       log_topic=log))
        self.record = DocumentRecordProcessor("bench-record", LibrarySettings(changelog=True, log_topic=log))
        for p in (self.store, self.switch, self.record):
            p.bus = bus

    async def start(self) -> None:
        for p in (self.store, self.switch, self.record):
            await p.start()

    async def close(self) -> None:
        for p in (self.store, self.switch, self.record):
            await p.close()

    async def document(self, collection: str, i: int, per_doc: int, rng: random.Random, edition: int = 0,
                       written: list | None = None, *, words: Sequence[str] = WORDS, words_per_chunk: int = 60,
                       dimension: int = DIMENSION) -> list[str]:
        """Document ``i`` written as document-load writes it (staged run, switch, record); its last token.
        Its ``per_doc`` chunks are ``words_per_chunk`` of ``words`` drawn at random, with random unit vectors of
        ``dimension``; ``written`` gets its first chunk's vector. Each ``edition`` is a version of its own
        (a version is the content hash's first 16 digits)."""
        document_id = f"doc-{i:06d}"
        version = generation_of(f"sha256:{i:08x}{edition:08x}{0:048x}")
        chunks = [Chunk(chunk_id=f"{document_id}#{p}", document_id=document_id, collection=collection,
                        text=" ".join(rng.choice(words) for _ in range(words_per_chunk)), title=f"document {i}",
                        position=p, generation=version) for p in range(per_doc)]
        vectors = rng_vectors(rng, per_doc, dimension)
        if written is not None:
            written.append(vectors[0])
        await self.store.handle(EmbeddedChunks(chunks=chunks, vectors=vectors, staged=True), request_context())
        await self.switch.handle(DeleteDocument(document_id=document_id, collection=collection, activate=version,
                                                chunks=per_doc), request_context())
        recorded = await self.record.handle(RecordDocument(document=DocumentInfo(
            document_id=document_id, collection=collection, title=f"document {i}", chunks=per_doc,
            generation=version)), request_context())
        return recorded.seen
