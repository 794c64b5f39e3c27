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


class LogWriters:
    """An ingestion host's document writers on a log: a version staged, its switch, its record, a removal."""

    def __init__(self, bus, log: str) -> None:
        self.store = DocEmbeddingsStoreProcessor("store", DocEmbeddingsSettings(changelog=True, log_topic=log))
        self.switch = DocEmbeddingsDeleteProcessor("switch", DocEmbeddingsSettings(changelog=True, log_topic=log))
        self.record = DocumentRecordProcessor("record", LibrarySettings(changelog=True, log_topic=log))
        self.rng = np.random.default_rng(5)
        for p in (self.store, self.switch, self.record):
            p.bus = bus

    async def __aenter__(self) -> LogWriters:
        for p in (self.store, self.switch, self.record):
            await p.start()
        return self

    async def __aexit__(self, *exc) -> None:
        for p in (self.store, self.switch, self.record):
            await p.close()

    @staticmethod
    def version(i: int, edition: int) -> str:
        """A version is the content hash's first 16 digits: each edition a version of its own."""
        return generation_of(f"sha256:{i:08x}{edition:08x}{0:048x}")

    async def stage(self, i: int, edition: int = 0) -> None:
        document_id, version = f"doc-{i}", self.version(i, edition)
        chunks = [Chunk(chunk_id=f"doc-{i}#{p}", document_id=document_id, collection="c", position=p,
                        text=f"text {p} of {i}, edition {edition}", title=f"doc {i}", generation=version)
                  for p in range(3)]
        vectors = self.rng.standard_normal((3, 8)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await self.store.handle(EmbeddedChunks(chunks=chunks, vectors=vectors.tolist(), staged=True), _context())

    async def activate(self, i: int, edition: int = 0) -> None:
        document_id, version = f"doc-{i}", self.version(i, edition)
        await self.switch.handle(DeleteDocument(document_id=document_id, collection="c", activate=version,
                                                chunks=3), _context())
        await self.record.handle(RecordDocument(document=DocumentInfo(document_id=document_id, collection="c",
                                                                      chunks=3, generation=version)), _context())

    async def remove(self, i: int) -> None:
        """The removal from the stores, then from the library, as a delete writes them."""
        await self.switch.handle(DeleteDocument(document_id=f"doc-{i}", collection="c"), _context())
        await self.record.handle(RecordDocument(document=DocumentInfo(document_id=f"doc-{i}", collection="c"),
                                                removed=True), _context())


async def write_documents(bus, log: str, count: int) -> None:
    """Documents as an ingestion host writes them to the log: a staged run, its switch, its record;
    every third one is written again (a new version), and the last one is removed."""
    async with LogWriters(bus, log) as writers:
        for i, edition in [(i, 0) for i in range(count)] + [(i, 1) for i in range(0, count, 3)]:
            await writers.stage(i, edition)
            await writers.activate(i, edition)
        await writers.remove(count - 1)
