"""Document-rag over shards (processors/document_rag/shards.py), with stub shards (no bus).

Each retrieval asks every shard, the hits merge by score; a shard that fails or misses its bound is
left out and named in ``degraded``; a chunk's fetch goes to the shard of its document.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ragbus.document_rag import DocumentRag
from ragbus.document_rag.shards import (
    ShardedDocEmbeddings,
    ShardedFetch,
    ShardedKeywords,
    ShardedMatches,
    ShardsFailed,
    merge_by_score,
)
from ragbus.runtime.typed_clients import DocEmbeddingsClient, KeywordClient, handling_must_see
from ragbus.schema import DEFAULT_COLLECTION, ChunkMatch, DocEmbeddingsResponse, KeywordQueryResponse, PromptResult
from ragbus.schema import FieldTokens, KeywordStatistics, TermCount
from ragbus.schema.changelog import document_order

LOG = "ragbus.changelog.documents"


def m(chunk_id: str, score: float, text: str | None = None) -> ChunkMatch:
    return ChunkMatch(chunk_id, score, text=text if text is not None else f"text of {chunk_id}",
                      document_id=chunk_id.rpartition("#")[0] or None)


def ranked(matches: list[ChunkMatch], limit: int) -> list[ChunkMatch]:
    """What one store answers: its best ``limit``, score descending, then chunk id."""
    return sorted(matches, key=lambda x: (-x.score, x.chunk_id))[:limit]


class Shard:
    """One shard's doc-embeddings-query or keyword-query: its matches, best first; or it fails or hangs."""

    def __init__(self, matches: list[ChunkMatch] = (), *, error: Exception | None = None, hang: bool = False):
        self.matches = list(matches)
        self.error, self.hang = error, hang
        self.calls: list[dict[str, Any]] = []
        self.asked_statistics: list[str] = []
        self.cancelled = 0

    async def statistics(self, *, query: str, collection: str = DEFAULT_COLLECTION,
                         must_see=()) -> KeywordStatistics:
        """keyword-query's first round: this shard's chunks, one term held by every one of them, and the text's
        tokens (three a chunk)."""
        self.asked_statistics.append(query)
        await self._fail_or_hang()
        n = len(self.matches)
        return KeywordStatistics(chunks=n, terms=[TermCount("text", "t", n)], lengths=[FieldTokens("text", 3 * n)])

    async def query(self, vectors=None, limit: int = 10, collection: str = DEFAULT_COLLECTION,
                    must_see=(), *, query: str | None = None, statistics=None) -> list[ChunkMatch]:
        self.calls.append({"vectors": vectors, "query": query, "limit": limit, "collection": collection,
                           "must_see": must_see, "statistics": statistics})
        await self._fail_or_hang()
        return ranked(self.matches, limit)

    async def _fail_or_hang(self) -> None:
        if self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.error is not None:
            raise self.error


def ids(matches) -> list[str]:
    return [x.chunk_id for x in matches]


# -- merging ------------------------------------------------------------------------------------


async def test_vector_hits_of_every_shard_merge_by_score_each_chunk_once_best_limit():
    shards = [Shard([m("a#0", 0.9), m("a#1", 0.4), m("d#0", 0.3)]),
              Shard([m("b#0", 0.95), m("b#1", 0.5), m("a#1", 0.6)]),  # a#1 held twice: its best score counts
              Shard([m("c#0", 0.7), m("c#1", 0.1)])]
    client = ShardedDocEmbeddings(shards, timeout_s=None)

    found = await client.query([[1.0, 0.0]], limit=4, collection="c1")

    assert ids(found) == ["b#0", "a#0", "c#0", "a#1"]
    assert [x.score for x in found] == [0.95, 0.9, 0.7, 0.6]
    assert isinstance(found, ShardedMatches) and found.missing == []
    for shard in shards:  # each asked once, for the whole limit, in the collection
        assert [(c["vectors"], c["limit"], c["collection"]) for c in shard.calls] == [([[1.0, 0.0]], 4, "c1")]


def test_equal_scores_merge_in_chunk_id_order_as_one_store_ranks_them():
    merged = merge_by_score([[m("z#0", 0.5), m("b#0", 0.5)], [m("a#0", 0.5), m("y#0", 0.8)]], limit=3)

    assert ids(merged) == ["y#0", "a#0", "b#0"]


async def test_keyword_shards_give_their_statistics_then_search_with_their_sums_and_merge_by_score():
    shards = [Shard([m("a#0", 7.5), m("a#1", 2.0)]), Shard([m("b#0", 11.0), m("b#1", 3.0), m("b#2", 1.0)])]

    found = await ShardedKeywords(shards, timeout_s=None).query(query="frozen set", limit=3)

    assert ids(found) == ["b#0", "a#0", "b#1"]
    assert [s.asked_statistics for s in shards] == [["frozen set"], ["frozen set"]]
    assert [c["query"] for s in shards for c in s.calls] == ["frozen set", "frozen set"]
    # Both searched with the statistics of both: 5 chunks, 5 holding the term, 15 tokens of text.
    assert [c["statistics"] for s in shards for c in s.calls] == [
        KeywordStatistics(chunks=5, terms=[TermCount("text", "t", 5)], lengths=[FieldTokens("text", 15)])] * 2


async def test_a_keyword_shard_that_fails_to_give_its_statistics_is_left_out_of_the_search():
    shards = [Shard([m("a#0", 7.5)]), Shard([m("b#0", 11.0)], error=RuntimeError("index gone"))]

    found = await ShardedKeywords(shards, timeout_s=None).query(query="frozen", limit=3)

    assert ids(found) == ["a#0"] and found.missing == [("shard-1", "keyword-query: RuntimeError: index gone")]
    assert shards[1].calls == []  # not searched: its statistics are not in the sums either
    assert shards[0].calls[0]["statistics"] == KeywordStatistics(chunks=1, terms=[TermCount("text", "t", 1)],
                                                                 lengths=[FieldTokens("text", 3)])


async def test_every_shard_is_asked_at_once():
    gate = asyncio.Event()
    arrived = []

    class Waiting(Shard):
        async def query(self, *args, **kwargs):
            arrived.append(self)
            if len(arrived) == 3:
                gate.set()
            await asyncio.wait_for(gate.wait(), 5)  # a shard asked after another answered never gets here
            return await super().query(*args, **kwargs)

    shards = [Waiting([m(f"{k}#0", k / 10)]) for k in range(3)]

    found = await ShardedDocEmbeddings(shards, timeout_s=None).query([[1.0]], limit=5)

    assert ids(found) == ["2#0", "1#0", "0#0"]


async def test_each_shard_request_carries_the_must_see_of_the_request_being_handled():
    class Recording:
        def __init__(self, response):
            self.response = response
            self.requests: list[tuple[str, Any]] = []

        async def request(self, topic, request, response_type, timeout=None):
            self.requests.append((topic, request))
            return self.response

    token = f"{LOG}@0:7"
    vectors = Recording(DocEmbeddingsResponse(matches=[m("a#0", 0.5)]))
    keywords = Recording(KeywordQueryResponse(matches=[m("a#0", 3.0)]))
    sharded_vectors = ShardedDocEmbeddings(
        [DocEmbeddingsClient(vectors, topic=f"doc-embeddings-query.shard-{k}") for k in range(2)], timeout_s=1.0)
    sharded_keywords = ShardedKeywords(
        [KeywordClient(keywords, topic=f"keyword-query.shard-{k}") for k in range(2)], timeout_s=1.0)

    seeing = handling_must_see.set((token,))
    try:
        await sharded_vectors.query([[1.0]], limit=2)
        await sharded_keywords.query(query="q", limit=2)
    finally:
        handling_must_see.reset(seeing)

    sent = vectors.requests + keywords.requests  # keyword-query twice a shard: its statistics, then the search
    assert sorted(topic for topic, _ in sent) == ["doc-embeddings-query.shard-0", "doc-embeddings-query.shard-1",
                                                  *["keyword-query.shard-0"] * 2, *["keyword-query.shard-1"] * 2]
    assert [request.must_see for _, request in sent] == [[token]] * 6


# -- shards left out ----------------------------------------------------------------------------


async def test_a_failing_shard_is_left_out_and_named_the_others_hits_kept():
    shards = [Shard([m("a#0", 0.9)]), Shard(error=RuntimeError("disk gone")), Shard([m("c#0", 0.7)])]

    found = await ShardedDocEmbeddings(shards, timeout_s=1.0).query([[1.0]], limit=5)

    assert ids(found) == ["a#0", "c#0"]
    assert found.missing == [("shard-1", "doc-embeddings-query: RuntimeError: disk gone")]


async def test_a_shard_past_its_bound_is_cut_and_named_the_others_hits_kept():
    hung = Shard(hang=True)
    shards = [Shard([m("a#0", 2.0)]), hung]

    found = await ShardedKeywords(shards, timeout_s=0.05).query(query="q", limit=5)

    assert ids(found) == ["a#0"]
    assert found.missing == [("shard-1", "keyword-query: timed out")]
    assert hung.cancelled == 1  # nothing of it left running


async def test_every_shard_failing_fails_the_call():
    shards = [Shard(error=RuntimeError("one")), Shard(hang=True)]

    with pytest.raises(ShardsFailed, match="every shard of keyword-query failed: shard-0: keyword-query: "
                                           "RuntimeError: one; shard-1: keyword-query: timed out"):
        await ShardedKeywords(shards, timeout_s=0.05).query(query="q", limit=5)


async def test_every_shard_timing_out_is_a_time_out():
    with pytest.raises(TimeoutError, match="every shard of doc-embeddings-query failed"):
        await ShardedDocEmbeddings([Shard(hang=True), Shard(hang=True)], timeout_s=0.05).query([[1.0]], limit=5)


# -- fetch --------------------------------------------------------------------------------------


class StubBus:
    """``partition_of`` by a table of document order keys; records what it was asked."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions
        self.asked: list[tuple[str, str]] = []

    async def partition_of(self, topic: str, order_key: str) -> int:
        self.asked.append((topic, order_key))
        return self.partitions[order_key]


class FetchShard:
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[Any, ...]] = []

    async def __call__(self, chunk_id: str, collection: str = DEFAULT_COLLECTION) -> str:
        self.calls.append((chunk_id, collection))
        return f"{self.name}: {chunk_id}"

    async def fetch(self, chunk_ids, collection=DEFAULT_COLLECTION, must_see=()) -> list[ChunkMatch]:
        self.calls.append((list(chunk_ids), collection, must_see))
        return [ChunkMatch(c, text=f"{self.name}: {c}") for c in chunk_ids if not c.startswith("gone")]


async def test_a_chunk_is_fetched_from_the_shard_of_its_documents_partition():
    # Three shards: partition p is shard p % 3. The document id may hold "#" itself.
    bus = StubBus({document_order("c1", "a"): 4, document_order("c1", "x#y"): 3,
                   document_order(DEFAULT_COLLECTION, "a"): 2})
    shards = [FetchShard(f"shard-{k}") for k in range(3)]
    fetch = ShardedFetch(shards, bus, LOG)

    assert await fetch("a#0", collection="c1") == "shard-1: a#0"
    assert await fetch("x#y#12", collection="c1") == "shard-0: x#y#12"
    assert await fetch("a#0") == "shard-2: a#0"
    assert bus.asked == [(LOG, document_order("c1", "a")), (LOG, document_order("c1", "x#y")),
                         (LOG, document_order(DEFAULT_COLLECTION, "a"))]
    assert [s.calls for s in shards] == [[("x#y#12", "c1")], [("a#0", "c1")], [("a#0", DEFAULT_COLLECTION)]]


async def test_a_chunk_id_naming_no_document_cannot_be_routed():
    fetch = ShardedFetch([FetchShard("shard-0")], StubBus({}), LOG)

    with pytest.raises(ValueError, match="names no document"):
        await fetch("no-position")


async def test_fetching_many_asks_each_shard_once_for_its_own_and_keeps_the_request_order():
    bus = StubBus({document_order("c1", d): p for d, p in (("a", 0), ("b", 1), ("c", 2), ("gone", 0))})
    shards = [FetchShard(f"shard-{k}") for k in range(2)]
    fetch = ShardedFetch(shards, bus, LOG)

    found = await fetch.fetch(["b#0", "a#0", "gone#1", "c#3", "a#1"], "c1", ["t@1"])

    assert [(x.chunk_id, x.text) for x in found] == [
        ("b#0", "shard-1: b#0"), ("a#0", "shard-0: a#0"), ("c#3", "shard-0: c#3"), ("a#1", "shard-0: a#1")]
    assert shards[0].calls == [(["a#0", "gone#1", "c#3", "a#1"], "c1", ["t@1"])]
    assert shards[1].calls == [(["b#0"], "c1", ["t@1"])]


# -- DocumentRag over shards --------------------------------------------------------------------


class Embed:
    async def embed(self, texts) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


class NoPrompt:
    """Sources only (``answer=False``, no concepts): the prompt is never asked."""

    def __getattr__(self, name):
        raise AssertionError(f"prompt.{name} must not be called")


VECTOR_HITS = [[m("a#0", 0.91), m("a#1", 0.52), m("d#0", 0.33), m("d#1", 0.2)],
               [m("b#0", 0.88), m("b#1", 0.61), m("b#2", 0.52)],
               [m("c#0", 0.75), m("c#1", 0.4), m("e#0", 0.39)]]
KEYWORD_HITS = [[m("a#1", 9.0), m("d#0", 4.5)],
                [m("b#2", 12.0), m("b#3", 6.0), m("b#0", 1.0)],
                [m("c#1", 7.0), m("e#0", 6.0), m("e#1", 0.5)]]


def rag(docs, keywords, fetch=None) -> DocumentRag:
    return DocumentRag(NoPrompt(), Embed(), docs, fetch or FetchShard("fetch"), kw_index_client=keywords,
                       retrieval_mode="hybrid", fusion="minmax", max_concepts=0)


@pytest.mark.parametrize("fusion", ["minmax", "dbsf", "rrf"])
@pytest.mark.parametrize("limit", [1, 4, 8])
async def test_hybrid_over_shards_finds_what_one_store_of_their_union_finds(limit, fusion):
    one = rag(Shard([x for hits in VECTOR_HITS for x in hits]), Shard([x for hits in KEYWORD_HITS for x in hits]))
    sharded = rag(ShardedDocEmbeddings([Shard(h) for h in VECTOR_HITS], timeout_s=1.0),
                  ShardedKeywords([Shard(h) for h in KEYWORD_HITS], timeout_s=1.0))

    alone = await one.query("q", doc_limit=limit, fusion=fusion, answer=False)
    merged = await sharded.query("q", doc_limit=limit, fusion=fusion, answer=False)

    assert len(alone.chunks) == limit
    assert [(c.chunk_id, c.score) for c in merged.chunks] == [(c.chunk_id, c.score) for c in alone.chunks]
    assert merged.paths == ["vector", "keyword"] and merged.degraded == [] == merged.problems


async def test_a_shard_left_out_degrades_the_answer_by_its_name_and_the_others_answer():
    vector_shards = [Shard(VECTOR_HITS[0]), Shard(error=RuntimeError("index gone")), Shard(VECTOR_HITS[2])]
    keyword_shards = [Shard(KEYWORD_HITS[0]), Shard(hang=True), Shard(KEYWORD_HITS[2])]
    r = await rag(ShardedDocEmbeddings(vector_shards, timeout_s=1.0),
                  ShardedKeywords(keyword_shards, timeout_s=0.05)).query("q", doc_limit=20, answer=False)

    assert r.degraded == ["shard-1"]
    assert r.problems == ["shard-1: doc-embeddings-query: RuntimeError: index gone",
                          "shard-1: keyword-query: timed out"]
    assert r.paths == ["vector", "keyword"]
    got = set(ids(r.chunks))
    assert got == {x.chunk_id for hits in VECTOR_HITS[::2] + KEYWORD_HITS[::2] for x in hits}
    assert not any(c.startswith("b#") for c in got)


async def test_a_shard_left_out_of_several_concepts_is_said_once():
    class Concepts:
        async def prompt(self, template_id, variables=None):
            return PromptResult("lines", "alpha\nbeta")

    docs = ShardedDocEmbeddings([Shard(VECTOR_HITS[0]), Shard(error=RuntimeError("index gone"))], timeout_s=1.0)
    r = await DocumentRag(Concepts(), Embed(), docs, FetchShard("fetch"), max_concepts=2).query(
        "q", answer=False)

    assert r.degraded == ["shard-1"]
    assert r.problems == ["shard-1: doc-embeddings-query: RuntimeError: index gone"]
    assert set(ids(r.chunks)) <= {x.chunk_id for x in VECTOR_HITS[0]} and r.chunks


async def test_every_keyword_shard_failing_degrades_the_keyword_path_as_one_failing_index_does():
    keyword_shards = [Shard(error=RuntimeError("down")) for _ in range(3)]
    r = await rag(ShardedDocEmbeddings([Shard(h) for h in VECTOR_HITS], timeout_s=1.0),
                  ShardedKeywords(keyword_shards, timeout_s=1.0)).query("q", doc_limit=3, answer=False)

    assert r.degraded == ["keyword"]
    [problem] = r.problems
    assert problem.startswith("keyword: ShardsFailed: every shard of keyword-query failed: shard-0: ")
    assert ids(r.chunks) == ["a#0", "b#0", "c#0"]


async def test_every_vector_shard_failing_fails_a_vector_query_as_one_failing_store_does():
    docs = ShardedDocEmbeddings([Shard(error=RuntimeError("down")) for _ in range(2)], timeout_s=1.0)

    with pytest.raises(ShardsFailed, match="every shard of doc-embeddings-query failed"):
        await DocumentRag(NoPrompt(), Embed(), docs, FetchShard("fetch"), max_concepts=0).query("q", answer=False)


async def test_chunks_without_text_are_fetched_from_their_shard():
    bus = StubBus({document_order(DEFAULT_COLLECTION, d): p for d, p in (("a", 2), ("b", 1))})
    fetch = ShardedFetch([FetchShard(f"shard-{k}") for k in range(2)], bus, LOG)
    bare = [[ChunkMatch("a#0", 0.9, document_id="a")], [ChunkMatch("b#0", 0.8, document_id="b")]]
    docs = ShardedDocEmbeddings([Shard(h) for h in bare], timeout_s=1.0)

    r = await DocumentRag(NoPrompt(), Embed(), docs, fetch, max_concepts=0).query("q", answer=False)

    assert [(c.chunk_id, c.text) for c in r.chunks] == [("a#0", "shard-0: a#0"), ("b#0", "shard-1: b#0")]
