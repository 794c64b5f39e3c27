"""Documents written to a documents log as an ingestion host's writers write them (changelog = true)."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np

from ragbus.doc_embeddings import DocEmbeddingsDeleteProcessor, DocEmbeddingsSettings, DocEmbeddingsStoreProcessor
from ragbus.stores.vectors.store import VectorStore
from ragbus.stores.layout import vectors_dir
from ragbus.keyword import KeywordIndex, KeywordSettings
from ragbus.library import DocumentRecordProcessor, LibrarySettings
from ragbus.stores.library import Library
from ragbus.stores.layout import library_path
from ragbus.runtime.envelope import Envelope, new_traceparent
from ragbus.runtime.processor import RequestContext
from ragbus.schema import Chunk, DeleteDocument, DocumentInfo, EmbeddedChunks, RecordDocument, generation_of


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
        await self.switch_to(i, edition)
        await self.record_of(i, edition)

    def entry(self, i: int, edition: int = 0) -> DocumentInfo:
        return DocumentInfo(document_id=f"doc-{i}", collection="c", chunks=3, generation=self.version(i, edition),
                            title=f"doc {i}, edition {edition}")

    async def switch_to(self, i: int, edition: int = 0, *, entry: bool = True) -> None:
        """The stores' switch, carrying the library's entry as document-load sends it (``entry=False``: as
        a writer from before entries on switches did)."""
        await self.switch.handle(DeleteDocument(
            document_id=f"doc-{i}", collection="c", activate=self.version(i, edition), chunks=3,
            document=self.entry(i, edition) if entry else None), _context())

    async def record_of(self, i: int, edition: int = 0) -> None:
        await self.record.handle(RecordDocument(document=self.entry(i, edition)), _context())

    async def remove(self, i: int) -> None:
        """The removal from the stores, then from the library, as a delete writes them."""
        await self.remove_from_stores(i)
        await self.record_removal(i)

    async def remove_from_stores(self, i: int) -> None:
        await self.switch.handle(DeleteDocument(document_id=f"doc-{i}", collection="c"), _context())

    async def record_removal(self, i: int) -> None:
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


async def compacted(bus, log: str) -> dict[str, object]:
    latest = {}
    async with await bus.read_log(log) as reader:
        while not await reader.caught_up():
            record = await reader.next()
            latest[record.key] = record
    return {k: r for k, r in latest.items() if r.body is not None}


async def caught_up(follower) -> None:
    """Until the follower has read the whole log and applied all of it: ``caught_up()`` alone holds while the
    last record read is still being applied (what applying it appends, a tombstone, not yet in the log);
    ``behind()`` counts that record."""
    for _ in range(1500):  # polled: caught_up() asks the log, there is no event to wait on
        if await follower.caught_up() and await follower.behind() == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the replica did not catch up")


async def compact_past_retention(bus, log: str) -> str:
    kept = {record.position for record in (await compacted(bus, log)).values()}
    copy = f"{log}-compacted"
    async with await bus.read_log(log) as reader:
        while not await reader.caught_up():
            record = await reader.next()
            if record.position in kept:
                await bus.append(copy, record.body, key=record.key, headers=record.headers)
            else:
                await bus.append(copy, None, key=f"gap\x1f{record.position}")
    return copy


def held(directory) -> tuple[set[str], set[str], set[str]]:
    """The documents a data dir's faiss store, keyword index and library hold."""
    vectors = VectorStore(vectors_dir(directory, "c"), "c", readonly=True)
    index = KeywordIndex.open_reader(directory, "c", KeywordSettings())
    assert index is not None
    library = Library(library_path(directory, "c"))
    library.catch_up()
    return ({r.document_id for r in vectors._rows}, {m.document_id for m in index.search("text", 10)},
            set(library.documents))


def served_document(directory, collection: str, document_id: str) -> tuple[dict[str, int], dict[str, int], str | None,
                                                                            str]:
    """What a data dir serves of a document: faiss's versions, tantivy's, the library's version and its token."""
    vectors = VectorStore(vectors_dir(directory, collection), collection, readonly=True)
    index = KeywordIndex.open_reader(directory, collection, KeywordSettings())  # None: never held a chunk
    library = Library(library_path(directory, collection))
    library.catch_up()
    entry = library.documents.get(document_id)
    return (vectors.versions(document_id), index.versions(document_id) if index else {},
            entry.generation if entry else None, entry.seen if entry else "")
