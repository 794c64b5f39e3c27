"""A reader's vector index carried across generations and restarts (processors/doc_embeddings/index.py).

Real faiss indexes over seeded random unit vectors, on the stores' own files; no mocks.
"""

from __future__ import annotations

import numpy as np

from processors.doc_embeddings import VectorStore
from processors.doc_embeddings.store import INDEX_CACHE

from .test_doc_embeddings import make_chunks, unit_vectors

HNSW = {"hnsw_threshold": 50}


def _stores(tmp_path, **reader):
    writer = VectorStore(tmp_path, "default", readonly=False, **HNSW)
    return writer, VectorStore(tmp_path, "default", readonly=True, refresh_interval_s=0, **HNSW, **reader)


def _ids(store: VectorStore, vector: np.ndarray, limit: int = 5) -> list[str]:
    return [m.chunk_id for m in store.search([vector.tolist()], limit)]


def test_a_reingest_adds_its_chunks_to_the_loaded_graph_and_the_old_version_is_never_found(tmp_path):
    rng = np.random.default_rng(1)
    writer, reader = _stores(tmp_path)
    old = {d: unit_vectors(rng, 10) for d in "abcdefgh"}
    for d, vectors in old.items():
        writer.replace_document(d, make_chunks(d, 10), vectors)
    assert _ids(reader, old["c"][3], 1) == ["c#3"]
    graph = reader.index
    assert graph is not None and reader.index_added == 80

    new = unit_vectors(rng, 10)
    writer.replace_document("c", make_chunks("c", 10), new)  # a new version: the same ids, other vectors
    writer.delete_document("e")
    assert _ids(reader, new[3], 1) == ["c#3"]
    assert reader.index is graph and reader.index_added == 90, "the graph was built again, not carried"
    # Every chunk the search returns is live, with the score of its live vector, and none twice.
    found = reader.search([old["c"][3].tolist()], 100)
    assert {m.chunk_id for m in found} == {f"{d}#{i}" for d in "abcdfgh" for i in range(10)}
    live = {f"c#{i}": new[i] for i in range(10)} | {f"{d}#{i}": old[d][i] for d in "abdfgh" for i in range(10)}
    for m in found:
        assert abs(m.score - float(live[m.chunk_id] @ old["c"][3])) < 1e-4, m.chunk_id


def test_once_more_labels_are_dead_than_alive_the_index_is_built_again(tmp_path):
    rng = np.random.default_rng(2)
    writer, reader = _stores(tmp_path)
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
    assert _ids(reader, latest[0], 1) == ["a#0"]
    assert reader.index is not graph and reader.index.ntotal == 60


def test_a_restarted_reader_reads_the_saved_index_and_adds_only_what_is_new(tmp_path):
    rng = np.random.default_rng(3)
    writer, reader = _stores(tmp_path)
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
    assert _ids(restarted, vectors["b"][4], 1) == ["b#4"]
    assert restarted.index_added == 10, "the restarted reader built its index instead of reading it"
    found = restarted.search([vectors["a"][0].tolist()], 100)
    assert {m.chunk_id for m in found} == {f"{d}#{i}" for d in "abcde" for i in range(10)}

    # Without the cache, the same start builds the index from the rows.
    cold = VectorStore(tmp_path, "default", readonly=True, index_cache=False, **HNSW)
    assert _ids(cold, vectors["b"][4], 1) == ["b#4"] and cold.index_added == 50


def test_a_cache_that_cannot_be_read_or_was_made_otherwise_is_built_again(tmp_path):
    rng = np.random.default_rng(4)
    writer, reader = _stores(tmp_path)
    vectors = unit_vectors(rng, 60)
    writer.replace_document("a", make_chunks("a", 60), vectors)
    reader.search([vectors[0].tolist()], 1)
    cache = tmp_path / INDEX_CACHE

    other_m = VectorStore(tmp_path, "default", readonly=True, hnsw_m=8, **HNSW)
    assert _ids(other_m, vectors[7], 1) == ["a#7"] and other_m.index_added == 60

    cache.write_bytes(cache.read_bytes()[:1000])  # torn
    torn = VectorStore(tmp_path, "default", readonly=True, **HNSW)
    assert _ids(torn, vectors[7], 1) == ["a#7"] and torn.index_added == 60
    again = VectorStore(tmp_path, "default", readonly=True, **HNSW)  # the build saved it whole again
    assert _ids(again, vectors[7], 1) == ["a#7"] and again.index_added == 0


def test_a_chunk_stored_again_with_another_vector_is_searched_by_the_new_one(tmp_path):
    rng = np.random.default_rng(5)
    writer, reader = _stores(tmp_path)
    chunks, vectors = make_chunks("a", 60), unit_vectors(rng, 60)
    writer.upsert(chunks, vectors)
    reader.search([vectors[0].tolist()], 1)
    moved = unit_vectors(rng, 1)
    writer.upsert([chunks[5]], moved)  # the same row, another vector (a new embedding model of one dimension)
    assert _ids(reader, moved[0], 1) == ["a#5"]
    assert all(m.chunk_id != "a#5" or m.score < 0.9 for m in reader.search([vectors[5].tolist()], 60))
    assert reader.index_added == 61


async def test_a_query_processor_saves_what_it_added_when_it_closes(tmp_path):
    from .test_doc_embeddings import pipeline

    rng = np.random.default_rng(6)
    vectors = unit_vectors(rng, 70)
    async with pipeline(tmp_path, reader=HNSW, writer=HNSW) as p:
        await p.store(make_chunks("a", 60), vectors[:60])
        await p.query.query([vectors[0].tolist()], limit=1)  # built and saved: 60 chunks
        await p.store(make_chunks("b", 10), vectors[60:])
        assert (await p.query.query([vectors[65].tolist()], limit=1))[0].chunk_id == "b#5"
        assert p.reader_store().index_added == 70
    restarted = VectorStore(tmp_path / "default" / "faiss", "default", readonly=True, **HNSW)
    assert _ids(restarted, vectors[65], 1) == ["b#5"]
    assert restarted.index_added == 0, "what the closed processor added was not saved"
