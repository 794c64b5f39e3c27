"""Every default of the doc-embeddings processors, in one place.

The four processors (query, fetch-chunk, store, delete) share this one
Settings class, so the sections that point them at the same store stay
short; each reads only the fields it uses. ``[processors.NAME]`` in the
settings sets any of them, e.g.::

    [processors.doc-embeddings-query]
    class = "ragbus.doc_embeddings:DocEmbeddingsQueryProcessor"
    data_dir = "/srv/ragbus"
    hnsw_ef_search = 128

and environment variables override them:
``RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S=0.25``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ragbus.config.settings import StoreSettings

Positive = Annotated[int, msgspec.Meta(ge=1)]


class DocEmbeddingsSettings(StoreSettings, kw_only=True, forbid_unknown_fields=True):
    # Below this many vectors a collection is searched exactly (faiss IndexFlatIP, brute force);
    # at or above it, approximately (IndexHNSWFlat, inner product). Flat search of 50k 384-d
    # vectors takes a few milliseconds; past that HNSW keeps queries fast at some recall cost.
    hnsw_threshold: Positive = 50_000
    # HNSW graph degree (faiss's M): more links, better recall, more memory (M * 8 bytes a vector).
    hnsw_m: Annotated[int, msgspec.Meta(ge=2, le=256)] = 32
    # HNSW candidate list while building the graph (faiss's efConstruction). Building is what a
    # replica pays when it reloads a changed collection: 40 (faiss's default) keeps it near
    # 1 s per 10k 384-d vectors on 2 cores; 80 doubles that for slightly better recall.
    hnsw_ef_construction: Positive = 40
    # HNSW candidate list while searching (faiss's efSearch); a search for more than this many
    # results uses the limit instead. Higher: better recall, slower queries.
    hnsw_ef_search: Positive = 64
    # A query replica looks at the store's generation file at most this often (seconds), before a
    # search or fetch, and reloads when the writer has published a newer one. A write acknowledged
    # at time t is therefore seen by every search that starts after t + refresh_interval_s
    # (that search first waits for the reload). 0 = look before every request.
    refresh_interval_s: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    # A query asking for more matches than this gets this many: the limit is clamped, not refused.
    max_limit: Positive = 100
    # A query replica saves an HNSW collection's index beside the collection's files once it has
    # built it, and again when it closes (``<collection>/faiss/index/hnsw.msgpack``), so that a
    # restart reads the index (a fraction of a second at 100,000 chunks) instead of building it
    # again (about 1 s per 10k 384-d vectors on 2 cores). false: never saved, always built.
    index_cache: bool = True
    # ... and every this many seconds while it runs, when the index changed since it was saved, so
    # that a replica killed reads one at most this old and adds only what changed since. The save
    # holds that replica's searches while it writes (the file is the vectors, the graph and the
    # chunks' metadata: a few KB a chunk). 0 = only once built and at close.
    index_save_interval_s: Annotated[float, msgspec.Meta(ge=0)] = 300.0
