"""Chunk vectors in faiss: the doc-embeddings-query, fetch-chunk, chunk-store and document-delete processors.

- ``DocEmbeddingsQueryProcessor``: ``DocEmbeddingsRequest`` -> ``DocEmbeddingsResponse``,
  the best chunks for any of the query vectors, with their text and metadata;
- ``FetchChunkProcessor``: ``FetchChunkRequest`` -> ``FetchChunkResponse``;
- ``DocEmbeddingsStoreProcessor``: ``EmbeddedChunks`` -> ``IngestResult``, upsert;
- ``DocEmbeddingsDeleteProcessor``: ``DeleteDocument`` -> ``IngestResult``.

Each collection lives in ``<data_dir>/<collection>/faiss/`` (format, atomic
writes and how fast read-only replicas see a write: ``processors/stores/vectors/store.py``).
Settings and their defaults: ``processors/stores/vectors/settings.py``.
"""

from .processor import (
    DocEmbeddingsDeleteProcessor,
    DocEmbeddingsQueryProcessor,
    DocEmbeddingsStoreProcessor,
    FetchChunkProcessor,
)
from ragbus.stores.vectors.settings import DocEmbeddingsSettings
from ragbus.stores.vectors.store import StoreError, VectorStore

__all__ = [
    "DocEmbeddingsDeleteProcessor",
    "DocEmbeddingsQueryProcessor",
    "DocEmbeddingsSettings",
    "DocEmbeddingsStoreProcessor",
    "FetchChunkProcessor",
    "StoreError",
    "VectorStore",
]
