"""Versions of documents staged beside a collection's stores, invisible to queries until switched to.

Document-load writes a new version of a document (every part of it) here first, and only
then has each store switch to it in one step (a faiss publish, a tantivy commit:
``DeleteDocument(activate=...)``), so a query sees the old version or the new one, never a
mix or neither (``schema/ingest.py``). Shared by the doc-embeddings store (chunks with
their vectors) and the keyword index (chunks alone, no vectors).

Layout, in ``<data_dir>/<collection>/staged/<store>/``::

    <document key>/<generation>/<first position>.msgpack   one store write: an EmbeddedChunks
    <document key>/<generation>/.superseded                 a switch not yet published superseded it

The document key is the sha256 of its id (an id is any text, a path say); the generation is
checked to be a plain name. The write holding position 0 begins a load of the version and
first clears what an earlier, failed load of it left (document-load sends a version's writes in
order, one after the other). Each write goes to a temporary file, is fsynced and renamed, so a
write delivered twice replaces itself, and a crash leaves whole files or none. Only the
store's writers touch it; query replicas never look. A switch drops the version it made live
once it is published (``HeldDrops``: a replica's batch publishes at its end), and a discard the
version discarded. Nothing else drops a staged version: one staged by a concurrent writer of the
document may still be switched to, after this switch in the log's order (docs/stores-from-the-log.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

import msgspec

from ragbus.schema import Chunk, EmbeddedChunks, check_generation

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(EmbeddedChunks).decode
_SUPERSEDED = ".superseded"  # in a version's directory: a switch or removal not yet published superseded it


# The writers that stage a document's versions, each under the name of its staging directory: the stores
# use these names, and a command that abandons a load (processors/cli/interrupted.py) clears them.
FAISS_STAGING = "faiss"
KEYWORD_STAGING = "keyword"
STAGING_WRITERS = (("doc-embeddings-store", FAISS_STAGING), ("keyword-store", KEYWORD_STAGING))


class Staging:
    """The staged versions of one collection's documents."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _document(self, document_id: str) -> Path:
        return self.root / hashlib.sha256(document_id.encode()).hexdigest()[:32]

    def put(self, chunks: list[Chunk], vectors: list[list[float]] | None = None) -> None:
        """Stage one write: chunks (with their vectors, for a vector store) of one document and one generation."""
        first = chunks[0]
        directory = self._document(first.document_id) / check_generation(first.generation)
        start = min(c.position for c in chunks)
        if start == 0:  # a load of the version begins: what an earlier, failed one left goes
            shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{start:012d}.msgpack"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_encode(EmbeddedChunks(chunks=chunks, vectors=vectors or [])))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def read(self, document_id: str, generation: str) -> tuple[list[Chunk], list[list[float]]]:
        """Every chunk staged as ``generation`` of the document, by position (the last write of an id wins),
        and their vectors (none where none were staged)."""
        directory = self._document(document_id) / check_generation(generation)
        if not directory.is_dir():
            return [], []
        latest: dict[str, tuple[Chunk, list[float] | None]] = {}
        for path in sorted(directory.glob("*.msgpack")):
            batch = _decode(path.read_bytes())
            vectors: list[list[float] | None] = [*batch.vectors] or [None] * len(batch.chunks)
            for chunk, vector in zip(batch.chunks, vectors, strict=True):
                latest[chunk.chunk_id] = (chunk, vector)
        ordered = sorted(latest.values(), key=lambda item: item[0].position)
        return [c for c, _ in ordered], [v for _, v in ordered if v is not None]

    def drop(self, document_id: str, generation: str | None = None) -> None:
        """Forget one staged version of the document, or (``None``) every one."""
        directory = self._document(document_id)
        if generation is None:
            shutil.rmtree(directory, ignore_errors=True)
            return
        shutil.rmtree(directory / check_generation(generation), ignore_errors=True)
        with contextlib.suppress(OSError):  # the document's directory goes once nothing is staged in it
            directory.rmdir()

    def supersede(self, document_id: str, generation: str) -> list[str]:
        """Mark the document's staged ``generation`` as superseded; the versions marked (it, if staged).

        A mark is a file in the version's directory: a new load of the version (its write at
        position 0 clears the directory) takes it away, so ``drop_superseded`` keeps that load.
        """
        staged = self._document(document_id) / check_generation(generation)
        if not staged.is_dir():
            return []
        (staged / _SUPERSEDED).touch()
        return [generation]

    def drop_superseded(self, document_id: str, versions: list[str]) -> None:
        """Forget each of ``versions`` still marked superseded (one staged again since is kept)."""
        directory = self._document(document_id)
        for version in versions:
            if (directory / version / _SUPERSEDED).exists():
                shutil.rmtree(directory / version, ignore_errors=True)
        with contextlib.suppress(OSError):  # the document's directory goes once nothing is staged in it
            directory.rmdir()


class HeldDrops:
    """A switch's drop of the version it made live from staging, held while its store defers publishing.

    A replica catching up in batches publishes a switch only when its batch ends, and counts the
    batch applied only then: one killed before reads the batch again from its checkpoint and
    switches again from what it staged, so a staged version must outlive its switch until the
    switch is published. While deferring, a drop marks what is staged (``Staging.supersede``)
    and waits for the publish (``run``): a version staged again after the mark (the document's
    next load in the same batch, or a replay of one after a restart) is kept for its own switch.
    """

    def __init__(self) -> None:
        self._held: list[tuple[Staging, str, list[str]]] = []

    def drop(self, staging: Staging, document_id: str, generation: str, *, hold: bool) -> None:
        if not hold:
            staging.drop(document_id, generation)
            return
        self._held.append((staging, document_id, staging.supersede(document_id, generation)))

    def run(self) -> None:
        """What was switched to is published: drop what the held drops marked."""
        held, self._held = self._held, []
        for staging, document_id, versions in held:
            staging.drop_superseded(document_id, versions)

    def forget(self) -> None:
        """The publish failed: what was staged stays, for the batch read again."""
        self._held = []
