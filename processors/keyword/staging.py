"""Versions of documents staged beside a collection's keyword index, unseen by searches until switched to.

The chunker writes a new version of a document (every part of it) here first, and only
then has the index switch to it in one commit (``DeleteDocument(activate=...)``), so a
search sees the old version or the new one, never a mix or neither (``schema/ingest.py``).
The doc-embeddings store stages the same way (its ``staging.py`` keeps vectors too).

Layout, in ``<data_dir>/<collection>/staged/keyword/``::

    <document key>/<generation>/<first position>.msgpack   one store write's chunks

The document key is the sha256 of its id; the generation is checked to be a plain name.
The write holding position 0 begins a load of the version and first clears what an earlier,
failed load of it left (the chunker sends a version's writes in order, one after the other).
Each write goes to a temporary file, is fsynced and renamed, so a write delivered twice
replaces itself. Only the keyword writer touches it, on its thread.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import msgspec

from schema import Chunk, check_collection, check_generation

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[Chunk]).decode


def staging_dir(data_dir: Path, collection: str) -> Path:
    return Path(data_dir) / check_collection(collection) / "staged" / "keyword"


class Staging:
    """The staged versions of one collection's documents."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _document(self, document_id: str) -> Path:
        return self.root / hashlib.sha256(document_id.encode()).hexdigest()[:32]

    def put(self, chunks: list[Chunk]) -> None:
        """Stage one write: chunks of one document and one generation."""
        first = chunks[0]
        directory = self._document(first.document_id) / check_generation(first.generation)
        start = min(c.position for c in chunks)
        if start == 0:  # a load of the version begins: what an earlier, failed one left goes
            shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{start:012d}.msgpack"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_encode(chunks))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def read(self, document_id: str, generation: str) -> list[Chunk]:
        """Every chunk staged as ``generation`` of the document, by position (the last write of an id wins)."""
        directory = self._document(document_id) / check_generation(generation)
        if not directory.is_dir():
            return []
        latest: dict[str, Chunk] = {}
        for path in sorted(directory.glob("*.msgpack")):
            latest.update((c.chunk_id, c) for c in _decode(path.read_bytes()))
        return sorted(latest.values(), key=lambda c: c.position)

    def drop(self, document_id: str, generation: str | None = None) -> None:
        """Forget one staged version of the document, or (``None``) every one."""
        directory = self._document(document_id)
        if generation is not None:
            directory = directory / check_generation(generation)
        shutil.rmtree(directory, ignore_errors=True)
