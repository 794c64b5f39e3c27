"""Document-load: a document (or one part of a large one) in, its chunks embedded and written to every store.

A document replaces its earlier version without a query ever seeing it half
done (``schema/ingest.py`` has the protocol). Each part's chunks carry the
document's version (``generation``, from its content hash) and are staged in
every store beside the version queries see; once the last part is staged
everywhere, each store is told to switch (``DeleteDocument(activate=...)``),
which makes the new version visible and drops every other in one commit of
that store. Until then nothing visible has changed: if embedding, a store or
any part fails, the stores are told to discard the staged version and the
earlier version stays as it was, whole. If a switch fails after another store
switched, the document is removed from every store, so none is left holding a
version the others do not.

A chunk is stored with its inline markup read as plain text (``processors/ingestion/markup.py``),
after it was cut and embedded as written.

The library (processors/library) is kept in step: a document stored whole is
recorded (with the sender's content hash and the version switched to), one removed is struck off, and a
part 0 whose hash, chunk size and overlap the library holds already is
answered ``unchanged`` before anything is embedded or stored. document-delete
also has the graph retract the document's facts (``retract_topic``).

Every call fits the bus: embed requests and store writes are packed into
messages within ``max_message_bytes`` (less room for headers), however many
chunks a part has, and only ``embed_concurrency`` embed requests are in
flight at once, so none waits in the embedder's queue past its time-out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import weakref
from collections.abc import AsyncIterator
from contextvars import ContextVar

import msgspec

from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.sizing import body_budget, pack
from ragbus.runtime.typed_clients import EmbedClient, RemoteError
from ragbus.schema import (
    BadRequest,
    Chunk,
    DeleteDocument,
    Document,
    DocumentInfo,
    DocumentList,
    EmbeddedChunks,
    IngestResult,
    ListDocuments,
    LoadTriples,
    RecordDocument,
    Superseded,
    encode,
    generation_of,
    parts_generation,
)
from ragbus.schema.document_ids import check_document_id

from .chunking import as_stored, chunk_part
from .settings import DocumentLoadSettings

log = logging.getLogger(__name__)

# msgpack's prefix of a string or an array: at most 5 bytes.
_PREFIX = 5

# One writer at a time per document in this process, from its switch to its library record: on the
# embedded default (and a data dir shared by one process's writers) the stores and the library then
# take concurrent writers of a document in one order. With stores from the log, the log's order does.
_writing: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = weakref.WeakValueDictionary()


# When the request being handled is cut off (the event loop's clock): every call made for it waits no longer,
# and carries that deadline, so a store write its caller gave up on is dropped as expired when it is
# delivered late (a worker killed, a busy store), instead of switching the document after a newer write.
_handling_until: ContextVar[float | None] = ContextVar("document_load_handling_until", default=None)


@contextlib.asynccontextmanager
async def writing(collection: str, document_id: str) -> AsyncIterator[None]:
    lock = _writing.get((collection, document_id))
    if lock is None:
        lock = _writing[(collection, document_id)] = asyncio.Lock()
    async with lock:
        yield


async def _call_all(client: RequestClient, topics: list[str], message, timeout: float) -> list[IngestResult]:
    results = await asyncio.gather(
        *(client.request(topic, message, IngestResult, timeout=timeout) for topic in topics)
    )
    for topic, r in zip(topics, results, strict=True):
        if r.error is not None:
            raise RemoteError(topic, r.error)
    return results


class _Calls(Processor):
    settings: DocumentLoadSettings

    async def start(self) -> None:
        self.client = await RequestClient(self.bus, name=self.name, timeout_s=self.settings.call_timeout_s).start()

    def wait_s(self) -> float:
        """How long a call made for the request being handled may wait: call_timeout_s, or until that request's
        own deadline when it is nearer (``_handling_until``)."""
        until = _handling_until.get()
        if until is None:
            return self.settings.call_timeout_s
        return max(0.001, min(self.settings.call_timeout_s, until - asyncio.get_running_loop().time()))

    async def close(self) -> None:
        await self.client.close()

    async def delete_everywhere(self, document_id: str, collection: str) -> IngestResult:
        """Remove the document from every chunk store, then from the library; the chunks removed (and,
        with stores from the log, where it holds the removal)."""
        async with writing(collection, document_id):
            return await self._remove_everywhere(document_id, collection)

    async def _remove_everywhere(self, document_id: str, collection: str) -> IngestResult:
        """``delete_everywhere`` by a caller that holds the document's ``writing`` already."""
        s = self.settings
        results = await _call_all(
            self.client,
            s.delete_topics,
            DeleteDocument(document_id=document_id, collection=collection),
            self.wait_s(),
        )
        seen = await self.record(DocumentInfo(document_id=document_id, collection=collection), removed=True)
        return IngestResult(count=max((r.count for r in results), default=0), seen=seen)

    async def record(self, document: DocumentInfo, *, removed: bool = False) -> list[str]:
        """The library is told; the ``seen`` tokens of the record, where the stores come from the log."""
        if not self.settings.record_topic:
            return []
        (result,) = await _call_all(
            self.client,
            [self.settings.record_topic],
            RecordDocument(document=document, removed=removed),
            self.wait_s(),
        )
        return result.seen

    async def held(self, doc: Document) -> DocumentInfo | None:
        """The library's entry of ``doc`` if it holds it with the same content hash."""
        s = self.settings
        if not (doc.content_hash and s.documents_topic):
            return None
        request = ListDocuments(collection=doc.collection, document_ids=[doc.document_id], limit=1)
        found = await self.client.request(s.documents_topic, request, DocumentList, timeout=self.wait_s())
        if found.error is not None:
            raise RemoteError(s.documents_topic, found.error)
        same = [d for d in found.documents if (d.document_id, d.content_hash, d.chunking) ==
                (doc.document_id, doc.content_hash, self.chunking)]
        return same[0] if same else None

    @property
    def chunking(self) -> str:
        # "plain": the chunks' text is stored with its markup read as plain text, so a document held
        # from before that (its markup stored as written) is chunked again when it is next ingested
        return f"{self.settings.chunk_size}/{self.settings.chunk_overlap}/plain"


class DocumentLoadProcessor(_Calls):
    request_type = Document
    response_type = IngestResult
    Settings = DocumentLoadSettings

    async def handle(self, doc: Document, context: RequestContext) -> IngestResult:
        s = self.settings
        _handling_until.set(self.handler_deadline(context))
        if not doc.document_id.strip():
            raise BadRequest("document_id is empty")
        check_document_id(doc.document_id)  # also for a document published straight onto the bus
        if doc.part == 0 and doc.first_position != 0:
            raise BadRequest(f"part 0 of document {doc.document_id!r} must start at position 0")
        if doc.part == 0 and (held := await self.held(doc)) is not None:
            return IngestResult(count=held.chunks, unchanged=1)  # every store holds this content: nothing to do
        chunks, resume_at = chunk_part(doc, s.chunk_size, s.chunk_overlap)
        if not doc.last and resume_at == 0:
            raise BadRequest(
                f"part {doc.part} of document {doc.document_id!r} ({len(doc.text)} characters) is too short to "
                f"hold a whole chunk of chunk_size={s.chunk_size}: parts must be larger (raise max_message_bytes)"
            )
        if doc.part == 0 and doc.last and not chunks:
            raise BadRequest(f"document {doc.document_id!r} has no text")
        version = _version(doc)
        chunks = [msgspec.structs.replace(c, generation=version) for c in chunks]
        try:
            vectors = await self._embed(chunks)
            # Stored and shown with the inline markup read as plain text (``*key*`` as ``key``), cut and
            # embedded as written: the ids are those of the text as cut, and the vectors those measured
            # (docs/retrieval-quality.md: embedding the plain text instead moved hybrid R@5 0.692 / 0.668
            # to 0.687 / 0.649, a question or two each way).
            stored = [as_stored(c) for c in chunks]
            for batch in self._store_batches(stored, vectors):
                await _call_all(self.client, s.store_topics, batch, self.wait_s())
            seen: list[str] = []
            if doc.last:  # staged whole everywhere: switch every store to it, then the library lists it
                total = doc.first_position + len(chunks)
                info = DocumentInfo(
                    document_id=doc.document_id, title=doc.title, source=doc.source, collection=doc.collection,
                    chunks=total, content_hash=doc.content_hash, chunking=self.chunking, generation=version,
                )
                async with writing(doc.collection, doc.document_id):
                    await self._switch(doc, version, total, info)
                    seen = await self.record(info)
        except PartlySwitched:
            raise
        except Exception as exc:
            log.warning("storing %s (part %d) failed; discarding its new version, the old one stays",
                        doc.document_id, doc.part)
            await self._discard(doc, version, exc)
            raise
        superseded = await self.superseded(doc, version, seen) if doc.last else None
        return IngestResult(count=len(chunks), resume_at=resume_at, seen=seen, superseded=superseded)

    async def superseded(self, doc: Document, version: str, seen: list[str]) -> Superseded | None:
        """What the library names instead of ``version`` once it applied this write, if not it: another
        writer's version of the document that came after (or its removal). None: served, or unknown."""
        s = self.settings
        if not s.documents_topic:
            return None
        request = ListDocuments(collection=doc.collection, document_ids=[doc.document_id], limit=1, must_see=seen)
        try:
            found = await self.client.request(s.documents_topic, request, DocumentList, timeout=self.wait_s())
            if found.error is not None:
                raise RemoteError(s.documents_topic, found.error)
        except Exception as exc:  # stored all the same: only whether another write came after is unknown
            log.warning("%s is stored, but whether another writer's version came after it is unknown: %s",
                        doc.document_id, exc)
            return None
        held = found.documents[0] if found.documents else None
        if held is not None and held.generation == version:
            return None
        return Superseded(generation=held.generation, seen=held.seen) if held else Superseded()

    async def _switch(self, doc: Document, version: str, total: int, info: DocumentInfo) -> None:
        """Every store switches to the staged ``version``; if only some could, the document leaves them all."""
        s = self.settings
        switch = DeleteDocument(document_id=doc.document_id, collection=doc.collection, activate=version,
                                chunks=total, document=info)
        results = await asyncio.gather(
            *(_call_all(self.client, [topic], switch, self.wait_s()) for topic in s.delete_topics),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if not failed:
            return
        if len(failed) == len(results):
            raise failed[0]  # none switched: the old version stands everywhere
        log.warning("switching %s to version %s failed in a store after another switched; removing it everywhere",
                    doc.document_id, version)
        try:
            await self._remove_everywhere(doc.document_id, doc.collection)  # under the switch's ``writing``
        except Exception as exc:
            failed[0].add_note(f"removing the document from every store failed too: {exc}")
            raise PartlySwitched(str(failed[0])) from failed[0]
        raise PartlySwitched(f"{failed[0]} (after another store switched to the new version, so the document "
                       "was removed from every store: ingest it again)") from failed[0]

    async def _discard(self, doc: Document, version: str, error: Exception) -> None:
        """Every store drops the staged ``version``; what queries see was never changed."""
        s = self.settings
        discard = DeleteDocument(document_id=doc.document_id, collection=doc.collection, discard=version)
        try:
            await _call_all(self.client, s.delete_topics, discard, s.call_timeout_s)
        except Exception as exc:  # staged files are left over: the next version of the document drops them
            error.add_note(f"discarding the staged version failed: {exc}")

    async def _embed(self, chunks: list[Chunk]) -> list[list[float]]:
        """The chunks' vectors, asked in batches of at most ``embed_batch`` texts that each fit a message."""
        s = self.settings
        embed = EmbedClient(self.client, topic=s.embed_topic, timeout=self.wait_s())
        sizes = [len(c.text.encode()) + _PREFIX for c in chunks]
        batches = list(pack(sizes, body_budget(self.bus.max_message_bytes), overhead=64, max_items=s.embed_batch))
        slots = asyncio.Semaphore(s.embed_concurrency)

        async def one(batch: range) -> list[list[float]]:
            async with slots:
                return await embed.embed(chunks[i].text for i in batch)

        return [v for vs in await asyncio.gather(*(one(b) for b in batches)) for v in vs]

    def _store_batches(self, chunks: list[Chunk], vectors: list[list[float]]) -> list[EmbeddedChunks]:
        """The store writes of a part (staged: see the module's docstring), each within the bus's message size."""
        if len(vectors) != len(chunks):
            raise ValueError(f"embed returned {len(vectors)} vectors for {len(chunks)} chunks")
        budget = body_budget(self.bus.max_message_bytes)
        sizes = [len(encode(c)) + len(encode(v)) for c, v in zip(chunks, vectors, strict=True)]
        overhead = len(encode(EmbeddedChunks(chunks=[], vectors=[], staged=True))) + 2 * _PREFIX
        try:
            runs = list(pack(sizes, budget, overhead=overhead))
        except ValueError:
            raise ValueError(
                f"a chunk with its vector takes up to {max(sizes)} bytes, more than a store write may hold on a bus "
                f"with max_message_bytes={self.bus.max_message_bytes}: lower chunk_size or raise max_message_bytes"
            ) from None
        return [EmbeddedChunks(chunks=chunks[r.start : r.stop], vectors=vectors[r.start : r.stop], staged=True)
                for r in runs]


class PartlySwitched(RuntimeError):
    """A switch failed after another store switched, and the document was removed from every store."""


def _version(doc: Document) -> str:
    """The version the document's parts build: from its content hash, or (one part) from its text.

    Parts sent without a content hash (``ragbus ingest`` always sends one) cannot name their
    content: they build version ``UNHASHED``. The switch to it is as atomic in each store, but
    while the stores switch one by one, document-rag cannot tell the old chunks from the new.
    """
    if not doc.content_hash and doc.part == 0 and doc.last:
        return generation_of("sha256:" + hashlib.sha256(doc.title.encode() + b"\0" + doc.text.encode()).hexdigest())
    return parts_generation(doc.content_hash)


class DocumentDeleteProcessor(_Calls):
    """A document out of every store: its chunks from each chunk store, its facts from the graph.

    ``count`` is the chunks removed, ``retracted`` the graph facts no longer believed. Every step
    is idempotent, so after one failed (an error answer) the next delete finishes the job.
    """

    request_type = DeleteDocument
    response_type = IngestResult
    Settings = DocumentLoadSettings

    async def handle(self, request: DeleteDocument, context: RequestContext) -> IngestResult:
        s = self.settings
        _handling_until.set(self.handler_deadline(context))
        if request.activate:
            raise BadRequest("document-delete removes a document or discards a staged version of it; "
                             "switching versions is document-load's own step")
        if request.discard:  # a sender's load that broke off: its staged parts go, what queries see stays
            await _call_all(self.client, s.delete_topics, request, self.wait_s())
            return IngestResult(count=0)
        chunks = self.delete_everywhere(request.document_id, request.collection)
        if not s.retract_topic:
            return await chunks
        retraction = LoadTriples(retract_sources=[request.document_id], collection=request.collection)
        retract = _call_all(self.client, [s.retract_topic], retraction, self.wait_s())
        removed, (retracted,) = await asyncio.gather(chunks, retract)
        # Where the logs hold the removal and the retraction: a read that must see the delete carries both.
        return IngestResult(count=removed.count, retracted=retracted.retracted,
                            seen=[*removed.seen, *retracted.seen])
