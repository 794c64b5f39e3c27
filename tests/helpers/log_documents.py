"""Documents written to a documents log as an ingestion host's writers write them (changelog = true)."""

from __future__ import annotations

import uuid

import numpy as np

from processors.doc_embeddings import DocEmbeddingsDeleteProcessor, DocEmbeddingsSettings, DocEmbeddingsStoreProcessor
from processors.library import DocumentRecordProcessor, LibrarySettings
from processors.runtime.envelope import Envelope, new_traceparent
from processors.runtime.processor import RequestContext
from schema import Chunk, DeleteDocument, DocumentInfo, EmbeddedChunks, RecordDocument, generation_of


def _context() -> RequestContext:
    envelope = Envelope(request_id=uuid.uuid4().hex, reply_to=None, attempt=1, deadline_ms=None,
                        traceparent=new_traceparent())
    return RequestContext(envelope=envelope, topic="test", delivery_attempt=1)


async def write_documents(bus, log: str, count: int) -> None:
    """Documents as an ingestion host writes them to the log: a staged run, its switch, its record;
    every third one is written again (a new version), and the last one is removed."""
    store = DocEmbeddingsStoreProcessor("store", DocEmbeddingsSettings(changelog=True, log_topic=log))
    switch = DocEmbeddingsDeleteProcessor("switch", DocEmbeddingsSettings(changelog=True, log_topic=log))
    record = DocumentRecordProcessor("record", LibrarySettings(changelog=True, log_topic=log))
    rng = np.random.default_rng(5)
    for p in (store, switch, record):
        p.bus = bus
        await p.start()
    writes = [(i, 0) for i in range(count)] + [(i, 1) for i in range(0, count, 3)]
    for i, edition in writes:
        # a version is the content hash's first 16 digits: each edition a version of its own
        document_id, version = f"doc-{i}", generation_of(f"sha256:{i:08x}{edition:08x}{0:048x}")
        chunks = [Chunk(chunk_id=f"doc-{i}#{p}", document_id=document_id, collection="c", position=p,
                        text=f"text {p} of {i}, edition {edition}", title=f"doc {i}", generation=version)
                  for p in range(3)]
        vectors = rng.standard_normal((3, 8)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await store.handle(EmbeddedChunks(chunks=chunks, vectors=vectors.tolist(), staged=True), _context())
        await switch.handle(DeleteDocument(document_id=document_id, collection="c", activate=version, chunks=3),
                            _context())
        await record.handle(RecordDocument(document=DocumentInfo(document_id=document_id, collection="c",
                                                                 chunks=3, generation=version)), _context())
    await switch.handle(DeleteDocument(document_id=f"doc-{count - 1}", collection="c"), _context())
    for p in (store, switch, record):
        await p.close()
