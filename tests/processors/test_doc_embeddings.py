"""The faiss doc-embeddings processors over the in-process bus, through the typed clients: no mocks.

Vectors are synthetic: seeded random unit vectors, so no embedding model is
needed; a query "near" a stored chunk is its vector plus a little noise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import faiss
import numpy as np
import pytest

from ragbus.config.settings import SettingsError, data_dir, default_data_dir, load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.doc_embeddings import (
    DocEmbeddingsDeleteProcessor,
    DocEmbeddingsQueryProcessor,
    DocEmbeddingsSettings,
    DocEmbeddingsStoreProcessor,
    FetchChunkProcessor,
    StoreError,
    VectorStore,
)
from ragbus.stores.vectors.store import INDEX_CACHE
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocEmbeddingsClient, FetchChunkClient, RemoteError
from ragbus.runtime.worker import build_processor
from ragbus.schema import Chunk, DeleteDocument, EmbeddedChunks, IngestResult
from ragbus.schema import topics as t

from ..helpers.serving import serving

DIM = 64


def unit_vectors(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def near(rng: np.random.Generator, v: np.ndarray, noise: float = 0.01) -> list[float]:
    q = v + noise * rng.standard_normal(v.shape).astype(np.float32)
    return (q / np.linalg.norm(q)).tolist()


def make_chunks(document_id: str, n: int, collection: str = "default") -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{document_id}#{i}",
            document_id=document_id,
            text=f"text {i} of {document_id}",
            position=i,
            title=f"Title of {document_id}",
            collection=collection,
        )
        for i in range(n)
    ]


@dataclass
class Pipeline:
    client: RequestClient
    query: DocEmbeddingsClient
    fetch: FetchChunkClient
    reader: DocEmbeddingsQueryProcessor
    writer: DocEmbeddingsStoreProcessor

    async def store(self, chunks: list[Chunk], vectors) -> int:
        vectors = vectors.tolist() if isinstance(vectors, np.ndarray) else vectors
        request = EmbeddedChunks(chunks=chunks, vectors=vectors)
        r = await self.client.request(t.CHUNK_STORE, request, IngestResult, timeout=30)
        if r.error is not None:
            raise RemoteError(t.CHUNK_STORE, r.error)
        return r.count

    async def delete(self, document_id: str, collection: str = "default") -> int:
        request = DeleteDocument(document_id=document_id, collection=collection)
        r = await self.client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=30)
        if r.error is not None:
            raise RemoteError(t.DOCUMENT_DELETE, r.error)
        return r.count

    def reader_store(self, collection: str = "default") -> VectorStore:
        return self.reader.stores[collection]


def settings(tmp_path, topic: str, **overrides) -> DocEmbeddingsSettings:
    values = {"data_dir": str(tmp_path), "refresh_interval_s": 0.0} | overrides
    return DocEmbeddingsSettings(topic=topic, group=topic, **values)


@contextlib.asynccontextmanager
async def pipeline(tmp_path, *, reader: dict | None = None, writer: dict | None = None):
    """The four processors on a private memory bus, one data directory; readers and writers are separate objects."""
    reader, writer = reader or {}, writer or {}
    name = f"docemb-{uuid.uuid4().hex[:12]}"
    bus = await connect(f"memory://{name}")
    query = DocEmbeddingsQueryProcessor("doc-embeddings-query", settings(tmp_path, t.DOC_EMBEDDINGS_QUERY, **reader))
    fetch = FetchChunkProcessor("fetch-chunk", settings(tmp_path, t.FETCH_CHUNK, **reader))
    store = DocEmbeddingsStoreProcessor("chunk-store", settings(tmp_path, t.CHUNK_STORE, **writer))
    delete = DocEmbeddingsDeleteProcessor("document-delete", settings(tmp_path, t.DOCUMENT_DELETE, **writer))
    try:
        async with contextlib.AsyncExitStack() as stack:
            for processor in (query, fetch, store, delete):
                await stack.enter_async_context(serving(bus, processor))
            client = await stack.enter_async_context(RequestClient(bus))
            clients = DocEmbeddingsClient(client, timeout=30), FetchChunkClient(client, timeout=30)
            yield Pipeline(client, *clients, query, store)
    finally:
        await bus.close()
        drop_memory_broker(name)


async def error_of(call) -> str:
    with pytest.raises(RemoteError) as caught:
        await call
    return f"{caught.value.error.type}: {caught.value.error.message}"


async def test_a_stored_vector_plus_noise_finds_its_chunk_first_with_score_about_one(tmp_path):
    rng = np.random.default_rng(1)
    vectors = unit_vectors(rng, 200)
    chunks = make_chunks("doc-a", 100) + make_chunks("doc-b", 100)
    async with pipeline(tmp_path) as p:
        assert await p.store(chunks, vectors) == 200
        for i in (0, 57, 150, 199):
            q = near(rng, vectors[i])
            matches = await p.query.query([q], limit=5)
            top = matches[0]
            assert top.chunk_id == chunks[i].chunk_id
            assert top.score == pytest.approx(1.0, abs=0.01)
            c = chunks[i]
            assert (top.text, top.document_id, top.title, top.position, top.collection) == (
                c.text, c.document_id, c.title, c.position, "default"
            )
            # exactly the brute-force top 5, in order
            expected = np.argsort(-(vectors @ np.array(q, dtype=np.float32)), kind="stable")[:5]
            assert [m.chunk_id for m in matches] == [chunks[j].chunk_id for j in expected]
            assert matches[1].score < 0.8


async def test_several_query_vectors_merge_with_the_best_score_per_chunk(tmp_path):
    rng = np.random.default_rng(2)
    vectors = unit_vectors(rng, 200)
    chunks = make_chunks("doc", 200)
    ids = [c.chunk_id for c in chunks]
    async with pipeline(tmp_path) as p:
        await p.store(chunks, vectors)
        both = await p.query.query([vectors[3].tolist(), vectors[7].tolist()], limit=2)
        assert sorted(m.chunk_id for m in both) == ["doc#3", "doc#7"]
        assert all(m.score == pytest.approx(1.0, abs=1e-5) for m in both)

        twice = await p.query.query([near(rng, vectors[3]), vectors[3].tolist()], limit=3)
        assert [m.chunk_id for m in twice].count("doc#3") == 1
        assert twice[0].chunk_id == "doc#3" and twice[0].score == pytest.approx(1.0, abs=1e-5)  # the better of the two

        queries = unit_vectors(rng, 3)
        matches = await p.query.query(queries.tolist(), limit=10)
        best = (queries @ vectors.T).max(axis=0)
        expected = sorted(range(200), key=lambda j: (-best[j], ids[j]))[:10]
        assert [m.chunk_id for m in matches] == [ids[j] for j in expected]
        assert [m.score for m in matches] == pytest.approx([float(best[j]) for j in expected], abs=1e-5)
        assert len({m.chunk_id for m in matches}) == 10


async def test_storing_a_chunk_again_replaces_it_and_never_duplicates(tmp_path):
    rng = np.random.default_rng(3)
    vectors = unit_vectors(rng, 50)
    chunks = make_chunks("doc", 50)
    generation_file = tmp_path / "default" / "faiss" / "GENERATION"
    async with pipeline(tmp_path) as p:
        assert await p.store(chunks, vectors) == 50
        generation = generation_file.read_text()
        assert await p.store(chunks, vectors) == 50  # a redelivered batch
        assert generation_file.read_text() == generation  # nothing changed, nothing written
        matches = await p.query.query([vectors[5].tolist()], limit=3)
        assert matches[0].chunk_id == "doc#5" and "doc#5" not in [m.chunk_id for m in matches[1:]]
        assert len(await p.query.query([vectors[5].tolist()], limit=100)) == 50

        # same id, new text and vector: replaced in place
        changed = Chunk(chunk_id="doc#5", document_id="doc", text="rewritten", position=5)
        new_vector = unit_vectors(rng, 1)[0]
        assert await p.store([changed], [new_vector.tolist()]) == 1
        top = (await p.query.query([new_vector.tolist()], limit=1))[0]
        assert (top.chunk_id, top.text) == ("doc#5", "rewritten") and top.score == pytest.approx(1.0, abs=1e-5)
        old = await p.query.query([vectors[5].tolist()], limit=1)
        assert old[0].score < 0.8  # the old vector is gone
        assert len(await p.query.query([vectors[5].tolist()], limit=100)) == 50

        # the same id twice in one batch: the last one wins, stored once
        a = Chunk(chunk_id="dup", document_id="doc", text="first", position=0)
        b = Chunk(chunk_id="dup", document_id="doc", text="second", position=1)
        assert await p.store([a, b], unit_vectors(rng, 2)) == 1
        assert [c.text for c in await p.fetch.fetch(["dup"])] == ["second"]
        assert len(await p.query.query([vectors[0].tolist()], limit=100)) == 51


async def test_delete_removes_a_documents_chunks_and_only_those(tmp_path):
    rng = np.random.default_rng(4)
    vectors = unit_vectors(rng, 60)
    chunks = make_chunks("doc-a", 30) + make_chunks("doc-b", 30)
    async with pipeline(tmp_path) as p:
        await p.store(chunks, vectors)
        assert await p.delete("doc-a") == 30
        matches = await p.query.query([vectors[0].tolist()], limit=100)
        assert len(matches) == 30 and {m.document_id for m in matches} == {"doc-b"}
        assert [c.chunk_id for c in await p.fetch.fetch(["doc-a#0", "doc-b#0"])] == ["doc-b#0"]
        assert await p.delete("doc-a") == 0
        assert await p.delete("doc-a", collection="never-written") == 0
        assert not (tmp_path / "never-written").exists()

        # the store processor keeps writing after the delete processor did: doc-a must stay gone
        assert await p.store(make_chunks("doc-c", 5), unit_vectors(rng, 5)) == 5
        ids = {m.chunk_id for m in await p.query.query([vectors[0].tolist()], limit=100)}
        assert len(ids) == 35 and not any(i.startswith("doc-a") for i in ids)

        # emptied completely: no matches, and it takes vectors of another dimension
        await p.delete("doc-b")
        await p.delete("doc-c")
        assert await p.query.query([vectors[0].tolist()], limit=10) == []
        assert await p.store(make_chunks("doc-d", 2), unit_vectors(rng, 2, dim=8)) == 2
        assert len(await p.query.query(unit_vectors(rng, 1, dim=8).tolist(), limit=10)) == 2


async def test_a_new_processor_instance_finds_what_an_earlier_one_stored(tmp_path):
    rng = np.random.default_rng(5)
    vectors = unit_vectors(rng, 40)
    async with pipeline(tmp_path) as p:
        assert await p.query.query([vectors[0].tolist()], limit=5) == []  # nothing there yet
        await p.store(make_chunks("doc", 20), vectors[:20])
        await p.store(make_chunks("other", 20, collection="other"), vectors[20:])
    async with pipeline(tmp_path) as p:  # new processors, new bus, same directory
        top = (await p.query.query([near(rng, vectors[7])], limit=1))[0]
        assert (top.chunk_id, top.collection) == ("doc#7", "default")
        top = (await p.query.query([near(rng, vectors[27])], limit=1, collection="other"))[0]
        assert (top.chunk_id, top.collection) == ("other#7", "other")
        await p.store(make_chunks("more", 5), unit_vectors(rng, 5))  # the new writer continues, not restarts
        assert len(await p.query.query([vectors[0].tolist()], limit=100)) == 25
    files = sorted(f.name for f in (tmp_path / "default" / "faiss").iterdir())
    assert files == [
        "GENERATION", "chunks.1.msgpack", "chunks.2.msgpack", "vectors.1.npy", "vectors.2.npy", "writer.lock",
    ]
    assert (tmp_path / "default" / "faiss" / "GENERATION").read_text() == "2\n"


async def test_a_read_replica_sees_the_writers_new_chunks_within_the_refresh_interval(tmp_path):
    interval = 0.3
    rng = np.random.default_rng(6)
    vectors = unit_vectors(rng, 21)
    loop = asyncio.get_running_loop()
    async with pipeline(tmp_path, reader={"refresh_interval_s": interval}) as p:
        await p.store(make_chunks("old", 20), vectors[:20])
        await asyncio.sleep(interval)  # let the reader's first look be older than the interval
        assert (await p.query.query([vectors[0].tolist()], limit=1))[0].chunk_id == "old#0"
        loaded = p.reader_store().generation

        await p.store([Chunk(chunk_id="new#0", document_id="new", text="fresh", position=0)], vectors[20:])
        acknowledged = loop.time()
        # The contract (stores/vectors/store.py): a query that starts a whole interval after the write was
        # acknowledged sees it, however long each query takes; asked until one starts that late.
        while True:
            started = loop.time()
            top = (await p.query.query([vectors[20].tolist()], limit=1))[0]
            if started >= acknowledged + interval:
                break
            await asyncio.sleep(0.01)
        assert top.chunk_id == "new#0", (f"a query started {started - acknowledged:.3f}s after the write did not "
                                         f"see it; refresh_interval_s={interval}")
        assert p.reader_store().generation == loaded + 1
        assert [c.text for c in await p.fetch.fetch(["new#0"])] == ["fresh"]


async def test_above_the_threshold_the_index_is_hnsw_and_still_finds_the_neighbour(tmp_path):
    rng = np.random.default_rng(7)
    vectors = unit_vectors(rng, 510)
    chunks = make_chunks("doc", 510)
    async with pipeline(tmp_path, reader={"hnsw_threshold": 100}, writer={"hnsw_threshold": 100}) as p:
        await p.store(chunks[:50], vectors[:50])
        await p.query.query([vectors[0].tolist()], limit=1)
        assert p.reader_store().index_kind == "flat" and isinstance(p.reader_store().index, faiss.IndexFlatIP)

        await p.store(chunks[50:500], vectors[50:500])
        sample = rng.choice(500, size=50, replace=False)
        queries = [near(rng, vectors[i], noise=0.02) for i in sample]
        truth = np.argmax(np.array(queries, dtype=np.float32) @ vectors[:500].T, axis=1)
        hits = 0
        for q, expected in zip(queries, truth, strict=True):
            matches = await p.query.query([q], limit=5)
            hits += matches[0].chunk_id == chunks[expected].chunk_id
        store = p.reader_store()
        assert store.index_kind == "hnsw" and isinstance(store.index, faiss.IndexHNSWFlat)
        assert store.index.ntotal == 500
        assert hits / len(queries) >= 0.95, f"recall@1 {hits / len(queries):.2f}"

        # new chunks only: the loaded graph is extended, not rebuilt
        graph = store.index
        await p.store(chunks[500:], vectors[500:])
        assert (await p.query.query([vectors[505].tolist()], limit=1))[0].chunk_id == "doc#505"
        assert store.index is graph and graph.ntotal == 510
        # a replacement is added too, and the vector it replaced is never found again
        replacement = unit_vectors(rng, 1)
        await p.store([chunks[0]], replacement)
        assert (await p.query.query([vectors[505].tolist()], limit=1))[0].chunk_id == "doc#505"
        assert store.index is graph and graph.ntotal == 511
        assert (await p.query.query([replacement[0].tolist()], limit=1))[0].chunk_id == "doc#0"
        found = await p.query.query([vectors[0].tolist()], limit=100)
        assert len({m.chunk_id for m in found}) == 100 and max(m.score for m in found) < 0.9


async def test_bad_queries_get_clear_errors_and_a_huge_limit_is_clamped(tmp_path):
    rng = np.random.default_rng(8)
    vectors = unit_vectors(rng, 150)
    async with pipeline(tmp_path) as p:
        await p.store(make_chunks("doc", 150), vectors)
        q = vectors[0].tolist()
        refused = "ValidationError: invalid DocEmbeddingsRequest: Expected `int` >= 1 - at `$.limit`"
        assert await error_of(p.query.query([q], limit=0)) == refused
        assert await error_of(p.query.query([q], limit=-1)) == refused
        assert len(await p.query.query([q], limit=10**9)) == 100  # clamped to max_limit
        assert await error_of(p.query.query([q[:16]], limit=5)) == (
            "ValueError: query vectors have 16 dimensions; collection 'default' holds 64-dimensional vectors"
        )
        nan = list(q)
        nan[3] = float("nan")
        message = await error_of(p.query.query([q, nan], limit=5))
        assert message == "ValueError: query vector 1 contains NaN or infinity"
        inf = list(q)
        inf[0] = float("inf")
        assert "query vector 0 contains NaN or infinity" in await error_of(p.query.query([inf], limit=5))
        assert "different dimensions" in await error_of(p.query.query([q, q[:10]], limit=5))
        assert "invalid collection name '../etc'" in await error_of(p.query.query([q], collection="../etc"))
        # nothing to search is no error
        assert await p.query.query([], limit=5) == []
        assert await p.query.query([q], limit=5, collection="never-written") == []
        assert not (tmp_path / "never-written").exists()
        # and the processor keeps serving
        assert (await p.query.query([q], limit=1))[0].chunk_id == "doc#0"


async def test_bad_batches_are_refused_and_change_nothing(tmp_path):
    rng = np.random.default_rng(9)
    vectors = unit_vectors(rng, 10)
    async with pipeline(tmp_path) as p:
        await p.store(make_chunks("doc", 10), vectors)
        message = await error_of(p.store(make_chunks("x", 3), vectors[:2]))
        assert message == "ValueError: 3 chunks but 2 vectors: each chunk needs exactly one vector"
        message = await error_of(p.store(make_chunks("x", 2), unit_vectors(rng, 2, dim=16)))
        assert message == "ValueError: vectors have 16 dimensions; collection 'default' holds 64-dimensional vectors"
        bad = unit_vectors(rng, 2).tolist()
        bad[1][5] = float("nan")
        assert await error_of(p.store(make_chunks("x", 2), bad)) == "ValueError: vector 1 contains NaN or infinity"
        # one bad collection refuses the whole batch, before anything is written
        mixed = make_chunks("x", 1) + make_chunks("y", 1, collection="bad/name")
        assert "invalid collection name 'bad/name'" in await error_of(p.store(mixed, unit_vectors(rng, 2)))
        assert len(await p.query.query([vectors[0].tolist()], limit=100)) == 10
        assert await p.store([], []) == 0


async def test_fetch_chunk_returns_texts_in_request_order(tmp_path):
    rng = np.random.default_rng(10)
    async with pipeline(tmp_path) as p:
        await p.store(make_chunks("doc", 10), unit_vectors(rng, 10))
        found = await p.fetch.fetch(["doc#5", "missing", "doc#2", "doc#9", "doc#5"])
        assert [c.chunk_id for c in found] == ["doc#5", "doc#2", "doc#9", "doc#5"]
        assert [c.text for c in found] == ["text 5 of doc", "text 2 of doc", "text 9 of doc", "text 5 of doc"]
        assert (found[1].document_id, found[1].title, found[1].position, found[1].collection) == (
            "doc", "Title of doc", 2, "default"
        )
        assert await p.fetch("doc#3") == "text 3 of doc"
        assert "NotFound" in await error_of(p.fetch("missing"))
        assert await p.fetch.fetch(["doc#1"], collection="never-written") == []
        assert await p.fetch.fetch([]) == []


def test_two_writers_on_one_directory_never_lose_each_others_changes(tmp_path):
    rng = np.random.default_rng(11)
    a = VectorStore(tmp_path, "default", readonly=False)
    b = VectorStore(tmp_path, "default", readonly=False)
    a.upsert(make_chunks("from-a", 3), unit_vectors(rng, 3))
    b.upsert(make_chunks("from-b", 2), unit_vectors(rng, 2))  # b catches up with a under the lock first
    assert a.delete_document("from-b") == 2
    reader = VectorStore(tmp_path, "default", readonly=True, refresh_interval_s=0)
    assert reader.count() == 3 and reader.generation == 3
    with pytest.raises(RuntimeError, match="read-only"):
        reader.upsert(make_chunks("x", 1), unit_vectors(rng, 1))


def test_unpublished_files_are_ignored_and_cleaned_up_and_missing_ones_are_reported(tmp_path):
    rng = np.random.default_rng(12)
    writer = VectorStore(tmp_path, "default", readonly=False)
    writer.upsert(make_chunks("doc", 3), unit_vectors(rng, 3))
    # what a writer that crashed mid-write leaves behind
    (tmp_path / "vectors.2.npy.tmp").write_bytes(b"half")
    (tmp_path / "chunks.9.msgpack").write_bytes(b"not published")
    reader = VectorStore(tmp_path, "default", readonly=True)
    assert reader.count() == 3 and reader.generation == 1
    writer.upsert(make_chunks("more", 1), unit_vectors(rng, 1))
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        "GENERATION", "chunks.1.msgpack", "chunks.2.msgpack", "vectors.1.npy", "vectors.2.npy", "writer.lock"
    ]
    (tmp_path / "GENERATION").write_text("7\n")
    with pytest.raises(StoreError, match="generation 7 is published but its files are missing"):
        VectorStore(tmp_path, "default", readonly=True)


def test_settings_defaults_and_wiring_from_a_config_file(tmp_path):
    defaults = DocEmbeddingsSettings()
    assert (defaults.hnsw_threshold, defaults.hnsw_m, defaults.hnsw_ef_search) == (50_000, 32, 64)
    assert defaults.max_limit == 100 and defaults.hnsw_ef_construction == 40
    assert defaults.refresh_interval_s == 1.0 and data_dir(defaults.data_dir) == default_data_dir()
    config = tmp_path / "ragbus.toml"
    config.write_text(
        '[processors.doc-embeddings-query]\n'
        'class = "ragbus.doc_embeddings:DocEmbeddingsQueryProcessor"\n'
        f'data_dir = "{tmp_path}"\n'
        "hnsw_ef_search = 128\n"
    )
    env = {"RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S": "0.25"}
    processor = build_processor(load_settings(config, environ=env), "doc-embeddings-query")
    assert isinstance(processor, DocEmbeddingsQueryProcessor)
    s = processor.settings
    assert (s.topic, s.hnsw_ef_search, s.refresh_interval_s, data_dir(s.data_dir)) == (
        "doc-embeddings-query", 128, 0.25, tmp_path
    )
    env = {"RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__HNSW_M": "1"}
    with pytest.raises(SettingsError, match="hnsw_m"):
        build_processor(load_settings(config, environ=env), "doc-embeddings-query")


def test_one_write_that_replaces_and_appends_leaves_the_loaded_matrix_alone(tmp_path):
    rng = np.random.default_rng(13)
    store = VectorStore(tmp_path, "default", readonly=False)
    first = unit_vectors(rng, 3)
    store.upsert(make_chunks("doc", 3), first)
    before = store._vectors  # what a search running meanwhile may still be reading
    kept = before.copy()
    replacement, appended = unit_vectors(rng, 1), unit_vectors(rng, 2)
    chunks = [make_chunks("doc", 3)[1], *make_chunks("more", 2)]
    chunks[0] = Chunk(chunk_id="doc#1", document_id="doc", text="new text", position=1, title="Title of doc",
                      collection="default")
    store.upsert(chunks, np.concatenate([replacement, appended]))
    assert np.array_equal(before, kept)
    reader = VectorStore(tmp_path, "default", readonly=True)
    assert reader.count() == 5
    expected = np.concatenate([first[:1], replacement, first[2:], appended])
    assert np.array_equal(reader._vectors, expected)
    best = reader.search([replacement[0].tolist()], 1)[0]
    assert (best.chunk_id, best.text) == ("doc#1", "new text")


async def test_a_staged_version_is_unseen_until_one_switch_replaces_the_document(tmp_path):
    """A new version is staged beside the old one, unseen by queries, and replaces it in one publish."""
    import msgspec

    rng = np.random.default_rng(11)
    old, other = make_chunks("doc-a", 6), make_chunks("doc-b", 3)
    new = [msgspec.structs.replace(c, text=c.text.upper(), generation="v2") for c in make_chunks("doc-a", 4)]
    vectors = unit_vectors(rng, 9)
    async with pipeline(tmp_path) as p:
        await p.store(old + other, vectors)

        async def request(message, topic=t.DOCUMENT_DELETE):
            r = await p.client.request(topic, message, IngestResult, timeout=30)
            if r.error is not None:
                raise RemoteError(topic, r.error)
            return r.count

        staged = EmbeddedChunks(chunks=new[:2], vectors=vectors[:2].tolist(), staged=True)
        assert await request(staged, t.CHUNK_STORE) == 2
        assert await request(staged, t.CHUNK_STORE) == 2  # delivered twice: the same staged write
        texts = {m.chunk_id: m.text for m in await p.query.query([vectors[0].tolist()], limit=100)}
        assert len(texts) == 9 and texts["doc-a#0"] == "text 0 of doc-a"  # nothing of it seen yet
        switch = DeleteDocument(document_id="doc-a", activate="v2", chunks=4)
        message = await error_of(request(switch))  # two of four staged: refused, nothing changes
        assert "2 chunk(s) of version v2" in message and "not 4" in message
        assert len(await p.query.query([vectors[0].tolist()], limit=100)) == 9
        generation = p.writer.stores["default"].generation
        staged = EmbeddedChunks(chunks=new[2:], vectors=vectors[2:4].tolist(), staged=True)
        assert await request(staged, t.CHUNK_STORE) == 2
        assert await request(switch) == 4
        matches = await p.query.query([vectors[0].tolist()], limit=100)
        assert sorted(m.chunk_id for m in matches if m.document_id == "doc-a") == [f"doc-a#{i}" for i in range(4)]
        assert {(m.text.isupper(), m.generation) for m in matches if m.document_id == "doc-a"} == {(True, "v2")}
        assert len(matches) == 7
        store = VectorStore(tmp_path / "default" / "faiss", "default", readonly=True)
        assert store.generation == generation + 1  # one publish: no reader saw the document half switched
        assert await request(switch) == 4  # the same switch again: nothing to do, and no error
        # A discarded version leaves the document as it is, and its staged files go.
        staged = EmbeddedChunks(chunks=[msgspec.structs.replace(new[0], generation="v3")],
                                vectors=vectors[:1].tolist(), staged=True)
        assert await request(staged, t.CHUNK_STORE) == 1
        assert await request(DeleteDocument(document_id="doc-a", discard="v3")) == 0
        assert len(await p.query.query([vectors[0].tolist()], limit=100)) == 7
        assert [f for f in (tmp_path / "default" / "staged").rglob("*") if f.is_file()] == []
        bad = EmbeddedChunks(chunks=[msgspec.structs.replace(new[0], generation="../x")],
                             vectors=vectors[:1].tolist(), staged=True)
        assert "invalid generation" in await error_of(request(bad, t.CHUNK_STORE))


def _changes(rng: np.random.Generator):
    """Replacements and removals, with a document replaced twice, one removed after its replacement,
    and a chunk id that moves from one document to another."""
    moved = Chunk(chunk_id="b#0", document_id="c", text="moved", position=0, title="c", collection="default")
    return [
        ("replace", "a", make_chunks("a", 3), unit_vectors(rng, 3)),
        ("replace", "b", make_chunks("b", 2), unit_vectors(rng, 2)),
        ("delete", "old", None, None),
        ("replace", "a", make_chunks("a", 2), unit_vectors(rng, 2)),
        ("replace", "c", [moved], unit_vectors(rng, 1)),
        ("replace", "d", make_chunks("d", 2), unit_vectors(rng, 2)),
        ("delete", "d", None, None),
    ]


def _apply(store: VectorStore, changes) -> list[int]:
    return [store.replace_document(doc, chunks, vectors) if op == "replace" else store.delete_document(doc)
            for op, doc, chunks, vectors in changes]


def test_deferred_changes_publish_once_and_hold_what_one_at_a_time_would(tmp_path):
    rng = np.random.default_rng(21)
    changes, old = _changes(rng), unit_vectors(rng, 2)
    one_by_one = VectorStore(tmp_path / "one", "default", readonly=False)
    deferred = VectorStore(tmp_path / "batch", "default", readonly=False)
    for store in (one_by_one, deferred):
        store.upsert(make_chunks("old", 2), old)
    counts = _apply(one_by_one, changes)
    reader = VectorStore(tmp_path / "batch", "default", readonly=True)
    deferred.defer()
    assert _apply(deferred, changes) == counts
    assert deferred.generation == 1 and reader.refresh(force=True) is False and reader.count() == 2  # unseen
    deferred.flush()
    assert deferred.generation == 2  # the seven changes, one generation
    assert reader.refresh(force=True) and reader._rows == one_by_one._rows
    assert np.array_equal(reader._vectors, one_by_one._vectors)
    deferred.upsert(make_chunks("e", 1), unit_vectors(rng, 1))  # not deferring any more: published at once
    assert deferred.generation == 3


def test_deferred_changes_refused_for_another_dimension_and_versions_see_them(tmp_path):
    rng = np.random.default_rng(22)
    store = VectorStore(tmp_path, "default", readonly=False)
    store.upsert(make_chunks("old", 1), unit_vectors(rng, 1))
    store.defer()
    with pytest.raises(ValueError, match="64-dimensional"):
        store.replace_document("a", make_chunks("a", 1), unit_vectors(rng, 1, dim=8))
    store.replace_document("a", make_chunks("a", 2), unit_vectors(rng, 2))
    assert store.versions("a") == {"": 2}  # what is deferred counts: published to answer
    store.flush()
    assert VectorStore(tmp_path, "default", readonly=True).count() == 3


def test_the_same_replacement_again_writes_nothing_and_another_one_does(tmp_path):
    rng = np.random.default_rng(23)
    store = VectorStore(tmp_path, "default", readonly=False)
    store.upsert(make_chunks("other", 2), unit_vectors(rng, 2))
    chunks, vectors = make_chunks("doc", 3), unit_vectors(rng, 3)
    store.replace_document("doc", chunks, vectors)
    assert store.generation == 2
    store.replace_document("doc", chunks, vectors)  # a switch sent again
    assert store.generation == 2
    store.replace_document("doc", chunks, unit_vectors(rng, 3))  # same rows, new vectors
    store.replace_document("doc", chunks[:2], store._vectors[2:4])  # fewer chunks
    assert store.generation == 4 and store.count() == 4


# A reader's index carried across generations and restarts (processors/stores/vectors/index.py).

HNSW = {"hnsw_threshold": 50}


def _index_stores(tmp_path, **reader):
    writer = VectorStore(tmp_path, "default", readonly=False, **HNSW)
    return writer, VectorStore(tmp_path, "default", readonly=True, refresh_interval_s=0, **HNSW, **reader)


def _top_ids(store: VectorStore, vector: np.ndarray, limit: int = 5) -> list[str]:
    return [m.chunk_id for m in store.search([vector.tolist()], limit)]


def test_a_reingest_adds_its_chunks_to_the_loaded_graph_and_the_old_version_is_never_found(tmp_path):
    rng = np.random.default_rng(1)
    writer, reader = _index_stores(tmp_path)
    old = {d: unit_vectors(rng, 10) for d in "abcdefgh"}
    for d, vectors in old.items():
        writer.replace_document(d, make_chunks(d, 10), vectors)
    assert _top_ids(reader, old["c"][3], 1) == ["c#3"]
    graph = reader.index
    assert graph is not None and reader.index_added == 80

    new = unit_vectors(rng, 10)
    writer.replace_document("c", make_chunks("c", 10), new)  # a new version: the same ids, other vectors
    writer.delete_document("e")
    assert _top_ids(reader, new[3], 1) == ["c#3"]
    assert reader.index is graph and reader.index_added == 90, "the graph was built again, not carried"
    # Every chunk the search returns is live, with the score of its live vector, and none twice.
    found = reader.search([old["c"][3].tolist()], 100)
    assert {m.chunk_id for m in found} == {f"{d}#{i}" for d in "abcdfgh" for i in range(10)}
    live = {f"c#{i}": new[i] for i in range(10)} | {f"{d}#{i}": old[d][i] for d in "abdfgh" for i in range(10)}
    for m in found:
        assert abs(m.score - float(live[m.chunk_id] @ old["c"][3])) < 1e-4, m.chunk_id


def test_once_more_labels_are_dead_than_alive_the_index_is_built_again(tmp_path):
    rng = np.random.default_rng(2)
    writer, reader = _index_stores(tmp_path)
    for d in "abcdef":
        writer.replace_document(d, make_chunks(d, 10), unit_vectors(rng, 10))
    reader.search([unit_vectors(rng, 1)[0].tolist()], 1)
    graph = reader.index
    for d in "abcdef":  # every document again: 60 live labels, 60 dead
        writer.replace_document(d, make_chunks(d, 10), unit_vectors(rng, 10))
        reader.search([unit_vectors(rng, 1)[0].tolist()], 1)
    assert reader.index is graph and graph.ntotal == 120
    latest = unit_vectors(rng, 10)
    writer.replace_document("a", make_chunks("a", 10), latest)
    assert _top_ids(reader, latest[0], 1) == ["a#0"]
    assert reader.index is not graph and reader.index.ntotal == 60


def test_a_restarted_reader_reads_the_saved_index_and_adds_only_what_is_new(tmp_path):
    rng = np.random.default_rng(3)
    writer, reader = _index_stores(tmp_path)
    vectors = {d: unit_vectors(rng, 10) for d in "abcdef"}
    for d, v in vectors.items():
        writer.replace_document(d, make_chunks(d, 10), v)
    reader.search([vectors["a"][0].tolist()], 1)  # built, and saved
    assert (tmp_path / INDEX_CACHE).is_file()

    # While it is down (killed: nothing saved at close), a document is re-ingested and one is removed.
    vectors["b"] = unit_vectors(rng, 10)
    writer.replace_document("b", make_chunks("b", 10), vectors["b"])
    writer.delete_document("f")
    restarted = VectorStore(tmp_path, "default", readonly=True, **HNSW)
    assert _top_ids(restarted, vectors["b"][4], 1) == ["b#4"]
    assert restarted.index_added == 10, "the restarted reader built its index instead of reading it"
    found = restarted.search([vectors["a"][0].tolist()], 100)
    assert {m.chunk_id for m in found} == {f"{d}#{i}" for d in "abcde" for i in range(10)}

    # Without the cache, the same start builds the index from the rows.
    cold = VectorStore(tmp_path, "default", readonly=True, index_cache=False, **HNSW)
    assert _top_ids(cold, vectors["b"][4], 1) == ["b#4"] and cold.index_added == 50


def test_a_cache_that_cannot_be_read_or_was_made_otherwise_is_built_again(tmp_path):
    rng = np.random.default_rng(4)
    writer, reader = _index_stores(tmp_path)
    vectors = unit_vectors(rng, 60)
    writer.replace_document("a", make_chunks("a", 60), vectors)
    reader.search([vectors[0].tolist()], 1)
    cache = tmp_path / INDEX_CACHE

    other_m = VectorStore(tmp_path, "default", readonly=True, hnsw_m=8, **HNSW)
    assert _top_ids(other_m, vectors[7], 1) == ["a#7"] and other_m.index_added == 60

    cache.write_bytes(cache.read_bytes()[:1000])  # torn
    torn = VectorStore(tmp_path, "default", readonly=True, **HNSW)
    assert _top_ids(torn, vectors[7], 1) == ["a#7"] and torn.index_added == 60
    again = VectorStore(tmp_path, "default", readonly=True, **HNSW)  # the build saved it whole again
    assert _top_ids(again, vectors[7], 1) == ["a#7"] and again.index_added == 0


def test_readers_sharing_a_data_dir_save_their_index_at_once_without_tearing_it(tmp_path, caplog):
    """Readers on several hosts may share a data dir (a query host that reads a writer's files): their
    saves of the index cache must not write one temporary file between them (a pid is no host's own)."""
    rng = np.random.default_rng(6)
    writer, _ = _index_stores(tmp_path)
    vectors = unit_vectors(rng, 2000)
    writer.replace_document("a", make_chunks("a", 2000), vectors)
    readers = [VectorStore(tmp_path, "default", readonly=True, **HNSW) for _ in range(4)]
    for reader in readers:
        reader.search([vectors[0].tolist()], 1)
    indexes = [reader._index for reader in readers]
    assert all(index is not None for index in indexes)

    def save_often(index) -> None:
        for _ in range(10):
            index.save(tmp_path / INDEX_CACHE)

    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(len(indexes)) as pool:
        list(pool.map(save_often, indexes))
    assert not [r.getMessage() for r in caplog.records if "index" in r.getMessage()]
    assert not [p.name for p in (tmp_path / INDEX_CACHE).parent.iterdir() if p.name.endswith(".tmp")]
    restarted = VectorStore(tmp_path, "default", readonly=True, **HNSW)
    assert _top_ids(restarted, vectors[7], 1) == ["a#7"] and restarted.index_added == 0


def test_a_chunk_stored_again_with_another_vector_is_searched_by_the_new_one(tmp_path):
    rng = np.random.default_rng(5)
    writer, reader = _index_stores(tmp_path)
    chunks, vectors = make_chunks("a", 60), unit_vectors(rng, 60)
    writer.upsert(chunks, vectors)
    reader.search([vectors[0].tolist()], 1)
    moved = unit_vectors(rng, 1)
    writer.upsert([chunks[5]], moved)  # the same row, another vector (a new embedding model of one dimension)
    assert _top_ids(reader, moved[0], 1) == ["a#5"]
    assert all(m.chunk_id != "a#5" or m.score < 0.9 for m in reader.search([vectors[5].tolist()], 60))
    assert reader.index_added == 61


async def test_a_query_processor_saves_what_it_added_when_it_closes(tmp_path):
    rng = np.random.default_rng(6)
    vectors = unit_vectors(rng, 70)
    async with pipeline(tmp_path, reader=HNSW, writer=HNSW) as p:
        await p.store(make_chunks("a", 60), vectors[:60])
        await p.query.query([vectors[0].tolist()], limit=1)  # built and saved: 60 chunks
        await p.store(make_chunks("b", 10), vectors[60:])
        assert (await p.query.query([vectors[65].tolist()], limit=1))[0].chunk_id == "b#5"
        assert p.reader_store().index_added == 70
    restarted = VectorStore(tmp_path / "default" / "faiss", "default", readonly=True, **HNSW)
    assert _top_ids(restarted, vectors[65], 1) == ["b#5"]
    assert restarted.index_added == 0, "what the closed processor added was not saved"


async def test_a_query_processor_saves_its_changed_index_while_it_runs(tmp_path):
    rng = np.random.default_rng(7)
    vectors = unit_vectors(rng, 70)
    directory = tmp_path / "default" / "faiss"
    async with pipeline(tmp_path, reader=HNSW | {"index_save_interval_s": 0.05}, writer=HNSW) as p:
        await p.store(make_chunks("a", 60), vectors[:60])
        await p.query.query([vectors[0].tolist()], limit=1)  # built and saved: 60 chunks
        await p.store(make_chunks("b", 10), vectors[60:])
        assert (await p.query.query([vectors[65].tolist()], limit=1))[0].chunk_id == "b#5"  # carried: 10 added
        # Still running (as if killed next): the saved index holds what was added, once the interval passed.
        for _ in range(200):
            await asyncio.sleep(0.05)
            read = VectorStore(directory, "default", readonly=True, **HNSW)
            if _top_ids(read, vectors[65], 1) == ["b#5"] and read.index_added == 0:
                break
        else:
            raise AssertionError("the running query processor did not save the index it had changed")
        mtime = (directory / INDEX_CACHE).stat().st_mtime_ns
        await asyncio.sleep(0.3)  # unchanged since: not written again
        assert (directory / INDEX_CACHE).stat().st_mtime_ns == mtime
