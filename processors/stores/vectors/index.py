"""The faiss index of one collection as a reader loaded it, kept across generations and restarts.

Labels are not rows. A label is a vector added to the faiss index once; a row is a chunk of the
generation loaded. When a new generation arrives, every row whose key (its whole metadata row)
and vector a live label already holds keeps that label, the other rows are added as new labels,
and the labels of rows gone are dead: a search skips them (a faiss ``IDSelectorBitmap`` of the
live labels; the graph still routes through them). A re-ingest or a removal therefore costs the
index the new chunks' insertions, not a rebuild of the collection (an HNSW build takes about
1 s per 10k 384-d vectors on 2 cores). Once more labels are dead than alive, the index is built
again from the rows (the dead cost memory and search time), so it holds at most twice the rows.

The index and its labels' keys are saved (``save``) to a cache file of the reader's: a restarted
reader loads it and carries it onto the generation it finds, in the time it takes to read the
file, instead of building the index again. The cache is never the truth (the store's rows and
vectors are): a cache that cannot be read, or was built with other settings, is ignored.

faiss is imported by the caller (``store.py``, on the first search), not here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import msgspec
import numpy as np

if TYPE_CHECKING:
    import faiss

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
_BLOCK = 8192  # rows compared at a time: bounds the copies a carry makes

K = TypeVar("K", bound=Hashable)


class _CacheFile(msgspec.Struct, Generic[K], kw_only=True):
    format: int
    kind: str
    dimension: int
    hnsw_m: int
    keys: list[K | None]  # per label; None: dead
    # faiss.serialize_index; a memoryview, so that neither encoding nor decoding copies it once more
    index: memoryview


class LabelledIndex(Generic[K]):
    """A faiss index and, per label, the key of the row it holds (None once the row is gone)."""

    def __init__(self, index: faiss.Index, kind: str, keys: list[K | None]) -> None:
        self.index = index
        self.kind = kind
        self.keys = keys
        self._label_of: dict[K, int] = {key: label for label, key in enumerate(keys) if key is not None}
        self.row_of_label = np.arange(len(keys), dtype=np.int64)
        self._live: np.ndarray | None = None  # bitmap of live labels, while any label is dead
        self.added = 0  # vectors added to the faiss index by this object

    @classmethod
    def build(cls, index: faiss.Index, kind: str, keys: Sequence[K], vectors: np.ndarray) -> LabelledIndex[K]:
        labelled = cls(index, kind, list(keys))
        labelled._add(vectors)
        return labelled

    @property
    def dead(self) -> int:
        return len(self.keys) - len(self._label_of)

    @property
    def dimension(self) -> int:
        return int(self.index.d)

    def carry(self, keys: Sequence[K], vectors: np.ndarray, most_new: int | None = None) -> bool:
        """Make the index describe rows ``keys`` (row i: key ``keys[i]``, vector ``vectors[i]``).

        Rows a live label holds (same key, same vector) keep it; the others are added; the labels
        no row holds die. False, with the index left as it was, when more labels would then be dead
        than alive, or more than ``most_new`` rows would be added: the caller builds a new one.
        """
        if vectors.shape[0] != len(keys) or (len(keys) and vectors.shape[1] != self.dimension):
            return False
        found = [self._label_of.get(key, -1) for key in keys]
        labels = np.array(found, dtype=np.int64) if found else np.zeros(0, dtype=np.int64)
        held = np.flatnonzero(labels >= 0)
        if held.size:
            stored = self._stored_vectors()
            for start in range(0, held.size, _BLOCK):
                rows = held[start : start + _BLOCK]
                differs = (vectors[rows] != stored[labels[rows]]).any(axis=1)
                labels[rows[differs]] = -1  # same metadata, another vector: a new label
        new = np.flatnonzero(labels < 0)
        total = len(self.keys) + new.size
        if total - len(keys) > len(keys) or (most_new is not None and new.size > most_new):
            return False
        first = len(self.keys)
        labels[new] = np.arange(first, first + new.size, dtype=np.int64)
        # The keys are the new rows' own objects, not the equal ones of the generation before: that
        # one's rows would otherwise stay in memory as long as the index does.
        self.keys = [None] * (first + new.size)
        self._label_of = {}
        for key, label in zip(keys, labels.tolist(), strict=True):
            self.keys[label] = key
            self._label_of[key] = label
        if new.size:
            self._add(vectors[new])
        self.row_of_label = np.full(len(self.keys), -1, dtype=np.int64)
        self.row_of_label[labels] = np.arange(len(keys), dtype=np.int64)
        self._live = None if self.dead == 0 else np.packbits(self.row_of_label >= 0, bitorder="little")
        return True

    def search(self, queries: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Scores and rows (-1: none) of the ``k`` best live labels per query; ``params`` a faiss SearchParameters."""
        import faiss

        live, row_of_label = self._live, self.row_of_label
        selector = None
        if live is not None:
            if params is None:
                params = faiss.SearchParameters()
            # faiss holds pointers, not references, to the selector and to its bitmap: the locals
            # keep both alive until the search returns, whatever the faiss wrapper keeps itself.
            selector = faiss.IDSelectorBitmap(row_of_label.size, faiss.swig_ptr(live))
            params.sel = selector
        scores, labels = self.index.search(queries, k, params=params)
        del selector
        rows = np.where(labels >= 0, row_of_label[np.maximum(labels, 0)], -1)
        return scores, rows

    def save(self, path: Path) -> None:
        """Write the index and its keys to ``path`` (atomically); an OSError is logged, not raised."""
        import faiss

        cache = _CacheFile(format=CACHE_FORMAT, kind=self.kind, dimension=self.dimension,
                           hnsw_m=_hnsw_m(self.index), keys=self.keys,
                           index=faiss.serialize_index(self.index).data)
        tmp: Path | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A temporary file of this save's own (created exclusively): readers on several hosts may
            # share the data dir, and a pid is no host's own.
            fd, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
            tmp = Path(name)
            with open(fd, "wb") as f:
                f.write(msgspec.msgpack.encode(cache))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:  # a read-only data dir, a full disk: the next start builds the index
            log.warning("cannot save the vector index to %s: %s", path, exc)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()

    @classmethod
    def load(cls, path: Path, key_type: type, kind: str, dimension: int, hnsw_m: int) -> LabelledIndex | None:
        """The index saved at ``path``, if there is one made with these settings; None otherwise."""
        import faiss

        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read the vector index cache %s: %s", path, exc)
            return None
        try:
            cache = msgspec.msgpack.decode(data, type=_CacheFile[key_type])  # type: ignore[valid-type]
            if (cache.format, cache.kind, cache.dimension, cache.hnsw_m) != (CACHE_FORMAT, kind, dimension, hnsw_m):
                log.info("%s was made with other settings: the index is built again", path)
                return None
            index = faiss.deserialize_index(np.frombuffer(cache.index, dtype=np.uint8))
        except (msgspec.DecodeError, msgspec.ValidationError, RuntimeError) as exc:
            log.warning("%s is not a readable vector index (%s): it is built again", path, exc)
            return None
        if index.ntotal != len(cache.keys) or index.d != dimension:
            log.warning("%s holds %d vectors for %d keys: it is built again", path, index.ntotal, len(cache.keys))
            return None
        labelled = cls(index, kind, cache.keys)
        labelled.row_of_label = np.full(len(cache.keys), -1, dtype=np.int64)  # no rows until carried
        return labelled

    def _add(self, vectors: np.ndarray) -> None:
        self.index.add(vectors)
        self.added += vectors.shape[0]

    def _stored_vectors(self) -> np.ndarray:
        """The index's own copy of its vectors, one row per label (a view, not a copy)."""
        import faiss

        storage = self.index.storage if hasattr(self.index, "storage") else self.index
        flat = cast("faiss.IndexFlat", faiss.downcast_index(storage))
        n, d = self.index.ntotal, self.index.d
        return np.asarray(faiss.rev_swig_ptr(flat.get_xb(), n * d)).reshape(n, d)


def _hnsw_m(index: faiss.Index) -> int:
    hnsw = getattr(index, "hnsw", None)
    return 0 if hnsw is None else int(hnsw.nb_neighbors(1))
