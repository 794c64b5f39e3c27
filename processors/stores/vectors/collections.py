"""``VectorCollections``: the open faiss stores of a data dir by collection, and the writes applied to them.

What the doc-embeddings processors and the documents replica share: a reader opens collections
read-only (any number of replicas); a writer upserts, stages a version beside the stores
(``staging.py``), switches to it in one publish, discards it, or removes a document. Every call
touches the stores, so it runs on the one thread its owner keeps for them (``runtime/threads.py``);
no call takes a lock of its own. A writer can defer its publishing (``set_deferring``): the switches
and removals of a replica's catch-up then make one generation, not one each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, overload

import numpy as np

from ragbus.config.settings import arguments_for
from ragbus.schema import Chunk, DeleteDocument, EmbeddedChunks, check_collection, check_generation

from ..layout import staging_dir, vectors_dir
from ..staging import FAISS_STAGING, HeldDrops, Staging
from .settings import DocEmbeddingsSettings
from .store import VectorStore, as_matrix


class VectorCollections:
    """The collections of ``data_dir`` opened so far; ``readonly`` for a reader."""

    def __init__(self, data_dir: Path, settings: DocEmbeddingsSettings, *, readonly: bool) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.readonly = readonly
        self.stores: dict[str, VectorStore] = {}
        self._deferring = False  # every store's publishing waits for set_deferring(False) (a replica's catch-up)
        self._drops = HeldDrops()  # staged versions a deferred switch or removal superseded

    @overload
    def get(self, collection: str, *, create: Literal[True]) -> VectorStore: ...
    @overload
    def get(self, collection: str, *, create: bool) -> VectorStore | None: ...

    def get(self, collection: str, *, create: bool) -> VectorStore | None:
        """The open store of ``collection``; None if it was never written and ``create`` is false.

        A collection that does not exist is not remembered, so a caller naming
        random collections costs a stat each, not memory.
        """
        store = self.stores.get(check_collection(collection))
        if store is None:
            directory = vectors_dir(self.data_dir, collection)
            if not create and not directory.is_dir():
                return None
            store = VectorStore(directory, collection, readonly=self.readonly,
                                **arguments_for(VectorStore, self.settings))
            if self._deferring:
                store.defer()
            self.stores[collection] = store
        return store

    def save_indexes(self) -> None:
        for store in self.stores.values():
            store.save_index()

    def set_deferring(self, on: bool) -> None:
        """Hold the stores' replacements and removals until called again with False: one generation for many."""
        self._deferring = on
        try:
            for store in self.stores.values():
                if on:
                    store.defer()
                else:
                    store.flush()
        except BaseException:
            self._drops.forget()
            raise
        if not on:
            self._drops.run()  # published: what the switches superseded can go

    def staging(self, collection: str) -> Staging:
        return Staging(staging_dir(self.data_dir, collection, FAISS_STAGING))

    def upsert(self, request: EmbeddedChunks) -> int:
        """Store (or, ``staged``, stage) the chunks; how many distinct chunks. See ``EmbeddedChunks``."""
        chunks, vectors = request.chunks, request.vectors
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors: each chunk needs exactly one vector")
        if not chunks:
            return 0
        matrix = as_matrix(vectors)
        by_collection: dict[str, list[int]] = {}
        for i, chunk in enumerate(chunks):
            by_collection.setdefault(check_collection(chunk.collection), []).append(i)
        stores = {c: self.get(c, create=True) for c in by_collection}
        for store in stores.values():
            # A staged write is checked against the dimension as loaded; the collection's files are read
            # again (at every document, they were) only when that refuses it. The switch checks them anyway.
            if not (request.staged and store.dimension == matrix.shape[1]):
                store.refresh(force=True)
            store.check_dimension(matrix.shape[1])
        if request.staged:
            return sum(self._stage(c, [chunks[i] for i in rows], matrix[rows]) for c, rows in by_collection.items())
        return sum(
            stores[c].upsert([chunks[i] for i in rows], matrix[rows]) for c, rows in by_collection.items()
        )

    def _stage(self, collection: str, chunks: list[Chunk], matrix: np.ndarray) -> int:
        by_version: dict[tuple[str, str], list[int]] = {}
        for i, chunk in enumerate(chunks):
            check_generation(chunk.generation)
            by_version.setdefault((chunk.document_id, chunk.generation), []).append(i)
        staging = self.staging(collection)
        for rows in by_version.values():
            staging.put([chunks[i] for i in rows], matrix[rows].tolist())
        return len({c.chunk_id for c in chunks})

    def change(self, request: DeleteDocument) -> int:
        """A switch to a staged version (its chunks), a discard (0) or a removal (the chunks removed)."""
        staging = self.staging(request.collection)
        if request.discard:
            staging.drop(request.document_id, request.discard)
            return 0
        if request.activate:
            return self._activate(request, staging)
        store = self.get(request.collection, create=False)  # what is staged stays (schema/ingest.py)
        return 0 if store is None else store.delete_document(request.document_id)

    def _activate(self, request: DeleteDocument, staging: Staging) -> int:
        document_id, version = request.document_id, request.activate
        chunks, vectors = staging.read(document_id, version)
        store = self.get(request.collection, create=True)
        if len(chunks) != request.chunks or not chunks:
            store.refresh(force=True)
            if store.versions(document_id) == {version: request.chunks}:
                return request.chunks  # switched already: this is the same switch again
            raise ValueError(
                f"{len(chunks)} chunk(s) of version {version} of document {document_id!r} are staged, "
                f"not {request.chunks}: the version is incomplete and was not switched to"
            )
        count = store.replace_document(document_id, chunks, vectors)
        self._drops.drop(staging, document_id, version, hold=self._deferring)
        return count

    def served_versions(self, collection: str) -> dict[str, str]:
        """The version each document of ``collection`` is served as."""
        store = self.get(collection, create=False)
        return {} if store is None else store.served_versions()
