"""One collection's chunk vectors on disk, searched with faiss.

Layout, in ``<data_dir>/<collection>/faiss/``::

    GENERATION            the published generation number, as text ("7\\n")
    vectors.7.npy         float32 matrix, one row per chunk (numpy .npy, no pickle)
    chunks.7.msgpack      format, generation, dimension and one row per chunk:
                          [chunk_id, document_id, text, title, position, version]
                          (version: the document's, ``Chunk.generation``; rows written
                          before versions existed have five fields and read as "")
    writer.lock           flock'ed by a writer while it changes the collection

The matrix and the metadata are the source of truth. Row ``i`` of the matrix is chunk ``i`` of
the metadata. The faiss index is a reader's: built from them on the first search, then carried
from generation to generation (``index.py``: rows kept keep their label in the index, new rows
are added, the labels of rows gone are skipped), and saved beside them, with ``index_cache``, as::

    index/hnsw.msgpack    an HNSW collection's index and the row each label holds, as a reader
                          last built or closed it: a restarted reader reads it and carries it
                          onto the generation it finds, instead of building the index again

Writing a change (``upsert``, ``delete_document``, ``replace_document``): under the writer lock,
reload if another writer published meanwhile, apply the change in memory,
write ``vectors.G+1.npy`` and ``chunks.G+1.msgpack`` (each to a temporary
file, fsync, ``os.replace``), fsync the directory, and only then replace
``GENERATION`` the same way. A reader that sees generation G+1 therefore
finds both of its files complete; a crash before the last step leaves
generation G published and unharmed (the orphans are overwritten or removed
by the next write). Files of older generations are removed after
publishing, except the previous generation's, so a reader that has just
read the old number still finds its files; one that loses even that race
(two more writes in between) reads the number again and retries.
Each write rewrites the collection's files: O(size of the collection) per
batch, which is simple and fine for collections of up to a few hundred
thousand chunks, not for tens of millions.

A writer that applies many changes in a row (a replica catching up with its log) can
``defer()`` publishing: document replacements and removals then change only a pending overlay,
and ``flush()`` publishes all of them as one generation, so a catch-up costs one rewrite per
flush instead of one per document (readers see everything flushed, or nothing of it).

One writer process is expected (the chunk-store and document-delete
processors); any number of read-only replicas may open the same directory.
Writers serialise on ``writer.lock`` anyway, so two writers, in one process
or several, never lose each other's changes.

Staleness of a read-only replica: before a search, fetch or count it
reads ``GENERATION`` if it has not done so for ``refresh_interval_s``, and
reloads when the number changed; that request waits for the reload.
A write acknowledged (``GENERATION`` replaced) at time t is thus visible to
every request that starts after t + refresh_interval_s: the replica's last
look at the file either came after t (and saw the new number) or is more
than refresh_interval_s old (and is repeated). The reload itself adds the
time to read the files and update the index: the chunks new to it are added (for HNSW, about
1 s per 10k 384-d vectors on 2 cores at ef_construction 40), the ones gone are skipped; once
more are skipped than held, the next search builds the index again.

Search: exact inner product (``IndexFlatIP``) while the collection holds
fewer than ``hnsw_threshold`` vectors, ``IndexHNSWFlat`` with inner product
at or above it. Vectors are expected to be unit length, as the embed
processor makes them, so the inner product is the cosine similarity; the
store does not normalise them. Memory: the matrix and the index each hold
the vectors (about 2 x n x dimension x 4 bytes, plus the HNSW graph).

A ``VectorStore`` is not thread-safe: the processors confine each store to
one worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

import msgspec
import numpy as np

from ragbus.schema import Chunk, ChunkMatch, check_collection

from .index import LabelledIndex
from .settings import DocEmbeddingsSettings

if TYPE_CHECKING:
    import faiss

log = logging.getLogger(__name__)

FORMAT = 1
GENERATION_FILE = "GENERATION"
LOCK_FILE = "writer.lock"
INDEX_CACHE = "index/hnsw.msgpack"
_DATA_FILE = re.compile(r"(?:vectors\.(\d+)\.npy|chunks\.(\d+)\.msgpack)")
_LOAD_ATTEMPTS = 5


class StoreError(RuntimeError):
    """The files of a collection are there but cannot be read as one."""


def as_matrix(vectors: Sequence[Sequence[float]] | np.ndarray, what: str = "vector") -> np.ndarray:
    """``vectors`` as a C-contiguous float32 matrix; ValueError for ragged, empty or non-finite ones."""
    if isinstance(vectors, np.ndarray):
        matrix = vectors
    else:
        dimensions = sorted({len(v) for v in vectors})
        if len(dimensions) > 1:
            raise ValueError(f"{what}s of different dimensions in one request: {dimensions[:10]}")
        matrix = np.array(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"expected a non-empty list of non-empty {what}s, got shape {matrix.shape}")
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    finite = np.isfinite(matrix).all(axis=1)  # after the cast: 1e39 is infinite in float32
    if not finite.all():
        i = int(np.argmin(finite))
        raise ValueError(f"{what} {i} contains NaN or infinity")
    return matrix


class _Row(msgspec.Struct, array_like=True, frozen=True):
    chunk_id: str
    document_id: str
    text: str
    title: str
    position: int
    version: str = ""  # the document's version (Chunk.generation); absent from rows of older stores


class _Metadata(msgspec.Struct, kw_only=True):
    format: int
    generation: int
    dimension: int
    rows: list[_Row]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Metadata)
_EMPTY = np.zeros((0, 0), dtype=np.float32)
# The keyword defaults of VectorStore are the processors' settings' own, written once there.
_DEFAULT = DocEmbeddingsSettings()


class VectorStore:
    """The chunks and vectors of one collection; see the module docstring for the format."""

    def __init__(
        self,
        directory: str | Path,
        collection: str,
        *,
        readonly: bool,
        hnsw_threshold: int = _DEFAULT.hnsw_threshold,
        hnsw_m: int = _DEFAULT.hnsw_m,
        hnsw_ef_construction: int = _DEFAULT.hnsw_ef_construction,
        hnsw_ef_search: int = _DEFAULT.hnsw_ef_search,
        refresh_interval_s: float = _DEFAULT.refresh_interval_s,
        index_cache: bool = _DEFAULT.index_cache,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory)
        self.collection = check_collection(collection)
        self.readonly = readonly
        self.hnsw_threshold = hnsw_threshold
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construction = hnsw_ef_construction
        self.hnsw_ef_search = hnsw_ef_search
        self.refresh_interval_s = refresh_interval_s
        self.index_cache = index_cache
        self._clock = clock
        self._generation = 0
        self._rows: list[_Row] = []
        self._vectors = _EMPTY
        self._row_of: dict[str, int] = {}
        self._index: LabelledIndex[_Row] | None = None
        self._saved: tuple[int, int, int] | None = None  # which index was saved last, and its size then
        self.index_added = 0  # vectors added to faiss indexes by this store: what its searches paid
        self._checked_at = float("-inf")
        # While deferring: each document replaced (its rows and vectors) or removed (None) since the last
        # flush, in the order of their latest change; None when not deferring.
        self._pending: dict[str, tuple[list[_Row], np.ndarray] | None] | None = None
        self._counts: dict[str, int] | None = None  # chunks per document as loaded, built when a removal asks
        self.refresh(force=True)

    # What it holds

    @property
    def dimension(self) -> int:
        """The dimension of the stored vectors; 0 while the collection is empty (it takes any)."""
        return self._vectors.shape[1] if self._rows else 0

    @property
    def generation(self) -> int:
        """The generation loaded: 0 for a collection never written."""
        return self._generation

    @property
    def index_kind(self) -> Literal["flat", "hnsw"]:
        """Which index a search of the collection as loaded uses."""
        return self._kind(len(self._rows))

    @property
    def index(self) -> faiss.Index | None:
        """The faiss index, once a search has built it (it may hold labels of rows gone: ``index.py``)."""
        return None if self._index is None else self._index.index

    def count(self) -> int:
        self.refresh()
        return len(self._rows)

    # Reading

    def search(self, queries: Sequence[Sequence[float]] | np.ndarray, limit: int) -> list[ChunkMatch]:
        """The ``limit`` best chunks for any of ``queries``: best score per chunk, score desc, then chunk_id."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if len(queries) == 0:
            return []
        matrix = as_matrix(queries, "query vector")
        self.refresh()
        if not self._rows:
            return []
        if matrix.shape[1] != self.dimension:
            raise ValueError(
                f"query vectors have {matrix.shape[1]} dimensions; collection {self.collection!r} "
                f"holds {self.dimension}-dimensional vectors"
            )
        index = self._ensure_index()
        k = min(limit, len(self._rows))
        params = None
        if index.kind == "hnsw":
            import faiss

            params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # in faiss, not in its stubs
            params.efSearch = max(self.hnsw_ef_search, k)  # fewer candidates than k cannot give k
        scores, found = index.search(matrix, k, params)
        best: dict[int, float] = {}
        for row_scores, row_found in zip(scores.tolist(), found.tolist(), strict=True):
            for score, row in zip(row_scores, row_found, strict=True):
                if row >= 0 and score > best.get(row, float("-inf")):
                    best[row] = score
        rows = self._rows
        ranked = sorted(best.items(), key=lambda item: (-item[1], rows[item[0]].chunk_id))
        return [self._match(label, score) for label, score in ranked[:limit]]

    def fetch(self, chunk_ids: Sequence[str]) -> list[ChunkMatch]:
        """The chunks of ``chunk_ids`` found, in request order (score 0.0); missing ids are left out."""
        self.refresh()
        found = (self._row_of.get(chunk_id) for chunk_id in chunk_ids)
        return [self._match(i, 0.0) for i in found if i is not None]

    def refresh(self, *, force: bool = False) -> bool:
        """Reload if a newer generation was published; looks at most every refresh_interval_s unless forced."""
        now = self._clock()
        if not force and now - self._checked_at < self.refresh_interval_s:
            return False
        self._checked_at = now  # before reading: the file read below is at least this recent
        generation = self._read_generation()
        if generation == self._generation:
            return False
        self._load(generation)
        return True

    # Writing

    def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]] | np.ndarray) -> int:
        """Store ``chunks`` with their vectors, replacing chunks of the same id; returns how many are stored.

        Idempotent: storing the same chunks again changes nothing (and writes nothing).
        Within one call, the last of several chunks with one id wins.
        """
        self._check_writable()
        if len(chunks) != len(vectors):
            raise ValueError(
                f"{len(chunks)} chunks but {len(vectors)} vectors: each chunk needs exactly one vector"
            )
        if not chunks:
            return 0
        matrix = as_matrix(vectors)
        latest = {chunk.chunk_id: i for i, chunk in enumerate(chunks)}
        with self._writer_lock():
            self._refresh_locked()
            self.check_dimension(matrix.shape[1])
            rows = list(self._rows)
            stored = self._vectors if self._rows else np.zeros((0, matrix.shape[1]), dtype=np.float32)
            replaced_at: list[int] = []
            replaced_from: list[int] = []
            appended_from: list[int] = []
            for chunk_id, i in latest.items():
                c = chunks[i]
                row = _Row(chunk_id, c.document_id, c.text, c.title, c.position, c.generation)
                j = self._row_of.get(chunk_id)
                if j is None:
                    rows.append(row)
                    appended_from.append(i)
                elif rows[j] != row or not np.array_equal(stored[j], matrix[i]):
                    rows[j] = row
                    replaced_at.append(j)
                    replaced_from.append(i)
            if not replaced_at and not appended_from:
                return len(latest)
            self._publish(rows, _updated(stored, replaced_at, matrix[replaced_from], matrix[appended_from]))
        return len(latest)

    def delete_document(self, document_id: str) -> int:
        """Remove every chunk of ``document_id``; returns how many were removed."""
        self._check_writable()
        if self._pending is not None:
            removed = self._pending_count(document_id)
            self._pending.pop(document_id, None)
            self._pending[document_id] = None
            return removed
        with self._writer_lock():
            self._refresh_locked()
            keep = [i for i, row in enumerate(self._rows) if row.document_id != document_id]
            removed = len(self._rows) - len(keep)
            if removed:
                rows = [self._rows[i] for i in keep]
                self._publish(rows, self._vectors[keep] if rows else _EMPTY)
        return removed

    def replace_document(self, document_id: str, chunks: Sequence[Chunk],
                         vectors: Sequence[Sequence[float]] | np.ndarray) -> int:
        """Make ``chunks`` the whole of ``document_id``, in one publish: a reader sees its chunks before or after.

        Every chunk stored for the document before (any version) goes; returns how many it now has.
        """
        self._check_writable()
        if len(chunks) != len(vectors) or not chunks:
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors: each chunk needs exactly one vector")
        matrix = as_matrix(vectors)
        if self._pending is not None:
            return self._defer_replace(document_id, chunks, matrix)
        new_ids = {c.chunk_id for c in chunks}
        with self._writer_lock():
            self._refresh_locked()
            keep: list[int] = []
            gone: list[int] = []
            for i, row in enumerate(self._rows):
                (gone if row.document_id == document_id or row.chunk_id in new_ids else keep).append(i)
            if keep and self.dimension != matrix.shape[1]:
                raise ValueError(
                    f"vectors have {matrix.shape[1]} dimensions; collection {self.collection!r} "
                    f"holds {self.dimension}-dimensional vectors"
                )
            new_rows = [_Row(c.chunk_id, c.document_id, c.text, c.title, c.position, c.generation) for c in chunks]
            # Already so (a switch sent again): the rows it replaces are the new ones, in order, at the end.
            # Compared on the document's rows alone: the whole collection's, at every switch, took as long
            # as writing it.
            if (gone == list(range(len(keep), len(self._rows))) and [self._rows[i] for i in gone] == new_rows
                    and np.array_equal(self._vectors[gone], matrix)):
                return len(chunks)
            rows = [self._rows[i] for i in keep] + new_rows
            vectors_out = np.concatenate([self._vectors[keep], matrix]) if keep else matrix
            self._publish(rows, vectors_out)
        return len(chunks)

    def defer(self) -> None:
        """From now on, replacements and removals wait for ``flush()`` to be published (one generation)."""
        self._check_writable()
        if self._pending is None:
            self._pending = {}

    def flush(self) -> int:
        """Publish what was deferred, as one generation, and stop deferring; the chunks held."""
        pending, self._pending = self._pending, None
        if not pending:
            return len(self._rows)
        with self._writer_lock():
            self._refresh_locked()
            changed = [value for value in pending.values() if value is not None]
            owner: dict[str, int] = {}  # a chunk id in two documents' new rows: the later one's stays
            for n, (new_rows, _) in enumerate(changed):
                owner.update((row.chunk_id, n) for row in new_rows)
            keep = [i for i, row in enumerate(self._rows)
                    if row.document_id not in pending and row.chunk_id not in owner]
            rows = [self._rows[i] for i in keep]
            parts = [self._vectors[keep]] if keep else []
            for n, (new_rows, matrix) in enumerate(changed):
                mine = [i for i, row in enumerate(new_rows) if owner[row.chunk_id] == n]
                rows.extend(new_rows[i] for i in mine)
                parts.append(matrix[mine])
            vectors = np.concatenate(parts) if rows else _EMPTY
            if rows != self._rows or not np.array_equal(vectors, self._vectors):  # else: switches sent again
                self._publish(rows, vectors)
        return len(self._rows)

    def documents(self) -> Iterator[tuple[str, list[Chunk], np.ndarray]]:
        """Each document the collection serves, in the order first stored: its id, its chunks in
        position order, and their vectors (what a log of the collection holds of it)."""
        self.refresh(force=True)
        rows_of: dict[str, list[int]] = {}
        for i, row in enumerate(self._rows):
            rows_of.setdefault(row.document_id, []).append(i)
        for document_id, rows in rows_of.items():
            rows.sort(key=lambda i: self._rows[i].position)
            chunks = [Chunk(chunk_id=r.chunk_id, document_id=r.document_id, text=r.text, position=r.position,
                            title=r.title, collection=self.collection, generation=r.version)
                      for r in (self._rows[i] for i in rows)]
            yield document_id, chunks, self._vectors[rows]

    def versions(self, document_id: str) -> dict[str, int]:
        """How many chunks of each version of ``document_id`` the store holds (as loaded)."""
        if self._pending:
            self.flush()
            self.defer()
        self.refresh()
        counts: dict[str, int] = {}
        for row in self._rows:
            if row.document_id == document_id:
                counts[row.version] = counts.get(row.version, 0) + 1
        return counts

    def served_versions(self) -> dict[str, str]:
        """The version each document of the collection is served as, with what is deferred applied (no publish)."""
        self.refresh()
        served = {row.document_id: row.version for row in self._rows}
        for document_id, value in (self._pending or {}).items():
            if value is None:
                served.pop(document_id, None)
            else:
                served[document_id] = value[0][0].version
        return served

    def _defer_replace(self, document_id: str, chunks: Sequence[Chunk], matrix: np.ndarray) -> int:
        assert self._pending is not None
        pending_dimension = next((v[1].shape[1] for v in self._pending.values() if v is not None), 0)
        held = pending_dimension or (self.dimension if self._rows else 0)
        if held and held != matrix.shape[1]:
            raise ValueError(
                f"vectors have {matrix.shape[1]} dimensions; collection {self.collection!r} "
                f"holds {held}-dimensional vectors"
            )
        rows = [_Row(c.chunk_id, c.document_id, c.text, c.title, c.position, c.generation) for c in chunks]
        self._pending.pop(document_id, None)
        self._pending[document_id] = (rows, matrix)
        return len(chunks)

    def _pending_count(self, document_id: str) -> int:
        """The chunks ``document_id`` has with what is deferred applied."""
        assert self._pending is not None
        if document_id in self._pending:
            value = self._pending[document_id]
            return 0 if value is None else len(value[0])
        if self._counts is None:
            self._counts = {}
            for row in self._rows:
                self._counts[row.document_id] = self._counts.get(row.document_id, 0) + 1
        return self._counts.get(document_id, 0)

    def check_dimension(self, dimension: int) -> None:
        """ValueError unless vectors of ``dimension`` fit: the stored one's, or any while empty."""
        if self._rows and dimension != self.dimension:
            raise ValueError(
                f"vectors have {dimension} dimensions; collection {self.collection!r} "
                f"holds {self.dimension}-dimensional vectors"
            )

    # Internals

    def _kind(self, n: int) -> Literal["flat", "hnsw"]:
        return "hnsw" if n >= self.hnsw_threshold else "flat"

    def _match(self, i: int, score: float) -> ChunkMatch:
        row = self._rows[i]
        return ChunkMatch(
            chunk_id=row.chunk_id,
            score=score,
            text=row.text,
            document_id=row.document_id,
            title=row.title,
            position=row.position,
            collection=self.collection,
            generation=row.version,
        )

    def _ensure_index(self) -> LabelledIndex[_Row]:
        if self._index is None:
            kind, dimension = self.index_kind, self._vectors.shape[1]
            cached = self._cached_index(kind, dimension)
            # Worth it while it holds most rows: adding the rest costs what building that many would.
            if cached is not None and cached.carry(self._rows, self._vectors, most_new=len(self._rows) // 2):
                log.info("%s: vector index read from its cache, %d chunk(s) added", self.directory, cached.added)
                self._index = cached
            else:
                self._index = LabelledIndex.build(self._new_index(dimension, len(self._rows)), kind, self._rows,
                                                  self._vectors)
            self.index_added += self._index.added
            if kind == "hnsw":
                self.save_index()  # built once: a restart, even after a kill, reads it instead
        return self._index

    def _cached_index(self, kind: str, dimension: int) -> LabelledIndex[_Row] | None:
        if kind != "hnsw" or not self.index_cache:
            return None
        return LabelledIndex.load(self.directory / INDEX_CACHE, _Row, kind, dimension, self.hnsw_m)

    def save_index(self) -> None:
        """Save an HNSW index to the cache, unless it is the one saved last and unchanged since."""
        index = self._index
        if index is None or index.kind != "hnsw" or not self.index_cache:
            return
        state = (id(index), index.added, len(index.keys))
        if state == self._saved:
            return
        index.save(self.directory / INDEX_CACHE)
        self._saved = state

    def _new_index(self, dimension: int, n: int) -> faiss.Index:
        # Imported when the first search needs an index, not with the module: faiss takes ~14 MB and
        # ~80 ms to import, which a command that never searches (ragbus --help, ingest) need not pay.
        import faiss

        if self._kind(n) == "flat":
            return faiss.IndexFlatIP(dimension)
        index = faiss.IndexHNSWFlat(dimension, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.hnsw_ef_construction
        index.hnsw.efSearch = self.hnsw_ef_search
        return index

    def _install(self, generation: int, rows: list[_Row], vectors: np.ndarray) -> None:
        """Make ``rows``/``vectors`` the loaded state; the index is carried onto them, or built on the next search."""
        index = self._index
        if index is not None:
            before = index.added
            if rows and index.kind == self._kind(len(rows)) and index.carry(rows, vectors):
                self.index_added += index.added - before
            else:
                index = None
        self._index = index
        self._generation = generation
        self._counts = None
        self._rows = rows
        self._vectors = vectors
        self._row_of = {row.chunk_id: i for i, row in enumerate(rows)}

    def _read_generation(self) -> int:
        path = self.directory / GENERATION_FILE
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            return 0
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"cannot read {path}: {exc}") from None
        try:
            return int(text.strip())
        except ValueError:
            raise StoreError(f"{path} holds {text[:40]!r}, not a generation number") from None

    def _load(self, generation: int) -> None:
        for _ in range(_LOAD_ATTEMPTS):
            if generation == 0:
                self._install(0, [], _EMPTY)
                return
            try:
                meta, vectors = self._read_files(generation)
            except FileNotFoundError:
                # Published and already removed again: two newer generations appeared meanwhile.
                newer = self._read_generation()
                if newer == generation:
                    raise StoreError(
                        f"{self.directory}: generation {generation} is published but its files are missing"
                    ) from None
                generation = newer
                continue
            self._install(generation, meta.rows, vectors)
            log.debug("%s: loaded generation %d, %d chunks", self.directory, generation, len(meta.rows))
            return
        raise StoreError(f"{self.directory}: generations changed faster than they could be read")

    def _read_files(self, generation: int) -> tuple[_Metadata, np.ndarray]:
        chunks_path = self.directory / f"chunks.{generation}.msgpack"
        vectors_path = self.directory / f"vectors.{generation}.npy"
        try:
            meta = _decoder.decode(chunks_path.read_bytes())
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise StoreError(f"{chunks_path} is not readable as chunk metadata: {exc}") from None
        if meta.format != FORMAT or meta.generation != generation:
            raise StoreError(
                f"{chunks_path}: format {meta.format}, generation {meta.generation}; "
                f"expected format {FORMAT}, generation {generation}"
            )
        try:
            vectors = np.load(vectors_path, allow_pickle=False)
        except ValueError as exc:
            raise StoreError(f"{vectors_path} is not a readable .npy matrix: {exc}") from None
        expected = (len(meta.rows), meta.dimension) if meta.rows else (0, 0)
        if vectors.dtype != np.float32 or vectors.shape != expected:
            raise StoreError(
                f"{vectors_path} holds {vectors.dtype} {vectors.shape}; {chunks_path} says float32 {expected}"
            )
        return meta, np.ascontiguousarray(vectors)

    def _check_writable(self) -> None:
        if self.readonly:
            raise RuntimeError(f"collection {self.collection!r} is open read-only")

    @contextlib.contextmanager
    def _writer_lock(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock(fd)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _refresh_locked(self) -> None:
        """Under the writer lock: catch up with what another writer published."""
        self._checked_at = self._clock()
        generation = self._read_generation()
        if generation != self._generation:
            self._load(generation)

    def _publish(self, rows: list[_Row], vectors: np.ndarray) -> None:
        generation = self._generation + 1
        dimension = vectors.shape[1] if rows else 0
        meta = _Metadata(format=FORMAT, generation=generation, dimension=dimension, rows=rows)
        _write_atomic(self.directory / f"vectors.{generation}.npy", lambda f: np.save(f, vectors, allow_pickle=False))
        _write_atomic(self.directory / f"chunks.{generation}.msgpack", lambda f: f.write(_encoder.encode(meta)))
        _fsync_dir(self.directory)  # both data files are durable before anyone may read them
        _write_atomic(self.directory / GENERATION_FILE, lambda f: f.write(f"{generation}\n".encode()))
        _fsync_dir(self.directory)
        self._install(generation, rows, vectors)
        self._remove_stale(generation)

    def _remove_stale(self, generation: int) -> None:
        """Under the writer lock: drop temporaries and data files of generations before the previous one."""
        for path in self.directory.iterdir():
            m = _DATA_FILE.fullmatch(path.name)
            old = m is not None and int(m[1] or m[2]) not in (generation, generation - 1)
            stale = old or path.name.endswith(".tmp")
            if stale:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def _updated(stored: np.ndarray, replaced_at: list[int], replacements: np.ndarray, appended: np.ndarray) -> np.ndarray:
    """A new matrix: ``stored`` with rows replaced and rows appended, built in one allocation.

    The loaded matrix is never changed in place (readers of this store may hold it), and a
    copy followed by a concatenation would hold the collection's vectors three times at once.
    """
    n = stored.shape[0]
    out = np.empty((n + appended.shape[0], stored.shape[1]), dtype=np.float32)
    out[:n] = stored
    out[replaced_at] = replacements
    out[n:] = appended
    return out


def _flock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # not POSIX: a single writer is assumed, as documented
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _write_atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    tmp = path.with_name(path.name + ".tmp")  # one writer at a time: the lock is held
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # not possible everywhere (Windows); the renames are still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
