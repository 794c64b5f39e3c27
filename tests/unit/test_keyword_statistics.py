"""A sharded collection's BM25: shards that score with the statistics of them all score as one index would.

Chunks are split over several indexes; with the summed statistics (chunks, chunks holding each query term,
tokens of each field) every shard gives each chunk the score the one index holding them all gives it, so
the merged ranking is that index's, also for chunks of different lengths. Without the summed field lengths
(each shard's own length normalisation) or with its own statistics alone, a shard's scores differ.
"""

from __future__ import annotations

import logging
import random

import pytest

from ragbus.document_rag.shards import merge_by_score, summed
from ragbus.schema import Chunk, FieldTokens, KeywordStatistics
from ragbus.stores.keywords import index as keyword_index
from ragbus.stores.keywords.index import KeywordIndex
from ragbus.stores.keywords.settings import KeywordSettings

WORDS = ["harbour", "ledger", "copper", "river", "signal", "garden", "winter", "lantern", "pepper", "violet",
         "marble", "canyon", "falcon", "meadow", "quartz", "saddle"]
# Terms tantivy's explanations write escaped (a combining vowel sign) or that only the ident field keeps whole.
ODD = ["कुछ", "naïve", "os.path.join", "__slots__"]
QUERIES = ["harbour ledger", "copper river signal", "quartz", "winter lantern pepper violet"]
ODD_QUERIES = ["कुछ naïve harbour", "os.path.join __slots__ marble", "Harbour ledger: copper, river!"]


def chunks(n: int, seed: int = 3) -> list[Chunk]:
    rng = random.Random(seed)
    out = []
    for i in range(n):  # eight words each, the title two: every chunk the same length in every field
        text = " ".join(rng.choice(WORDS[: 4 + i % 12]) for _ in range(8))
        title = " ".join(rng.choice(WORDS) for _ in range(2))
        out.append(Chunk(chunk_id=f"d{i}#0", document_id=f"d{i}", text=text, title=title, position=0))
    return out


def uneven_chunks(n: int, seed: int = 5) -> list[Chunk]:
    """Chunks of 1 to 60 words and titles of 0 to 5, the first third short: each shard's average lengths
    differ from the whole's in every field."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(1, 8) if i < n // 3 else rng.randint(4, 60)
        text = " ".join(rng.choice(WORDS + ODD) for _ in range(length))
        title = " ".join(rng.choice(WORDS + ODD) for _ in range(rng.randint(0, 5)))
        out.append(Chunk(chunk_id=f"d{i}#0", document_id=f"d{i}", text=text, title=title, position=0))
    return out


def tokens(statistics: KeywordStatistics) -> dict[str, int]:
    return {f.field: f.tokens for f in statistics.lengths}


def index(tmp_path, name: str, held: list[Chunk]) -> KeywordIndex:
    writer = KeywordIndex.open_writer(tmp_path / name, "default", KeywordSettings())
    writer.upsert(held)
    writer.commit()
    return writer


@pytest.fixture
def uneven(tmp_path):
    """One index of the uneven chunks and three shards of them (a third, two sixths, the rest)."""
    every = uneven_chunks(90)
    indexes = [index(tmp_path, "whole", every), index(tmp_path, "shard-0", every[:30]),
               index(tmp_path, "shard-1", every[30:45]), index(tmp_path, "shard-2", every[45:])]
    yield indexes[0], indexes[1:]
    for i in indexes:
        i.close()


@pytest.mark.parametrize("query", QUERIES)
def test_shards_scoring_with_the_summed_statistics_rank_as_one_index(tmp_path, query):
    every = chunks(60)
    whole = index(tmp_path, "whole", every)
    third = len(every) // 3  # a third and two thirds: each shard's statistics differ from the whole's
    shards = [index(tmp_path, "shard-0", every[:third]), index(tmp_path, "shard-1", every[third:])]
    try:
        assert sum(s.count() for s in shards) == whole.count()
        total = summed(s.statistics(query) for s in shards)
        assert total.chunks == whole.count()
        assert {(t.field, t.term): t.chunks for t in total.terms} == {
            (t.field, t.term): t.chunks for t in whole.statistics(query).terms}
        limit = 10
        one = whole.search(query, limit)
        merged = merge_by_score([s.search(query, limit, total) for s in shards], limit)
        assert [m.chunk_id for m in merged] == [m.chunk_id for m in one]
        assert [m.score for m in merged] == pytest.approx([m.score for m in one], rel=1e-4)
        raw = merge_by_score([s.search(query, limit) for s in shards], limit)
        assert [m.score for m in raw] != pytest.approx([m.score for m in one], rel=1e-4)  # their own: they differ
    finally:
        for i in (whole, *shards):
            i.close()


@pytest.mark.parametrize("query", QUERIES + ODD_QUERIES)
def test_shards_of_chunks_of_different_lengths_score_as_one_index_with_the_summed_field_lengths(uneven, query,
                                                                                                caplog):
    whole, shards = uneven
    total = summed(s.statistics(query) for s in shards)
    assert tokens(total) == tokens(whole.statistics(query))  # of each field, summed
    averages = [{f.field: f.tokens / s.count() for f in s.statistics(query).lengths} for s in shards]
    assert averages[0]["text"] < averages[2]["text"] / 3  # the lengths the shards normalise by differ

    caplog.set_level(logging.WARNING, logger=keyword_index.__name__)
    limit = 10
    one = whole.search(query, limit)
    merged = merge_by_score([s.search(query, limit, total) for s in shards], limit)
    assert [m.chunk_id for m in merged] == [m.chunk_id for m in one]
    assert [m.score for m in merged] == pytest.approx([m.score for m in one], rel=1e-4)
    assert caplog.records == []  # every explained clause read, none left to tantivy's own score

    # The same chunk counts and term counts, each shard's own length normalisation: the scores differ.
    idf_only = KeywordStatistics(chunks=total.chunks, terms=total.terms)
    unnormalised = merge_by_score([s.search(query, limit, idf_only) for s in shards], limit)
    assert [m.score for m in unnormalised] != pytest.approx([m.score for m in one], rel=1e-4)


def test_the_shards_best_chunks_are_one_indexs_at_every_limit_however_few_candidates_are_first_asked_for(
        uneven, monkeypatch):
    # One candidate a place at first, more as the bound asks (the test below shows why it must).
    monkeypatch.setattr(keyword_index, "OVERFETCH", 1)
    monkeypatch.setattr(keyword_index, "OVERFETCH_MIN", 0)
    whole, shards = uneven
    for query in ("harbour ledger copper", "quartz saddle falcon meadow"):
        total = summed(s.statistics(query) for s in shards)
        for limit in range(1, whole.count() + 2):
            one = whole.search(query, limit)
            merged = merge_by_score([s.search(query, limit, total) for s in shards], limit)
            assert [m.chunk_id for m in merged] == [m.chunk_id for m in one], (query, limit)
            assert [m.score for m in merged] == pytest.approx([m.score for m in one], rel=1e-4), (query, limit)


def test_a_chunk_its_shard_ranks_last_is_found_when_the_whole_collections_lengths_rank_it_first(tmp_path,
                                                                                               monkeypatch):
    # Shard a: nine chunks of two words and one of forty, "harbour" four times in it; shard b: long chunks
    # without it. Its shard's short average length sinks the long chunk; the whole's long average lifts it
    # above the others: only the bound (no chunk scores more than the ratio of the averages times what
    # tantivy gave it) has the shard look past the one candidate it asks for first.
    monkeypatch.setattr(keyword_index, "OVERFETCH", 1)
    monkeypatch.setattr(keyword_index, "OVERFETCH_MIN", 0)
    filler = " ".join(WORDS[1:13] * 5)
    a = [Chunk(chunk_id=f"a{i}#0", document_id=f"a{i}", text="harbour ledger", position=0) for i in range(9)]
    a.append(Chunk(chunk_id="long#0", document_id="long", text="harbour " * 4 + " ".join(filler.split()[:36]),
                   position=0))
    b = [Chunk(chunk_id=f"b{i}#0", document_id=f"b{i}", text=filler, position=0) for i in range(40)]
    whole, shard_a, shard_b = index(tmp_path, "whole", a + b), index(tmp_path, "a", a), index(tmp_path, "b", b)
    try:
        assert [m.chunk_id for m in shard_a.search("harbour", 10)][-1] == "long#0"  # by its own lengths: last
        total = summed(s.statistics("harbour") for s in (shard_a, shard_b))
        for limit in (1, 2, 3):
            one = whole.search("harbour", limit)
            assert one[0].chunk_id == "long#0"  # by the whole's: first
            merged = merge_by_score([s.search("harbour", limit, total) for s in (shard_a, shard_b)], limit)
            assert [m.chunk_id for m in merged] == [m.chunk_id for m in one]
            assert [m.score for m in merged] == pytest.approx([m.score for m in one], rel=1e-4)
    finally:
        for i in (whole, shard_a, shard_b):
            i.close()


def test_an_index_scoring_with_its_own_statistics_scores_as_tantivy_does_deleted_chunks_counted(tmp_path):
    held = uneven_chunks(40)
    writer = index(tmp_path, "one", held)
    try:
        for chunk in held[:15]:  # deleted, not merged away: BM25 still counts them, and so must the statistics
            writer.replace_document(chunk.document_id, [])
        writer.commit()
        query = "harbour ledger copper river"
        own = writer.statistics(query)
        assert writer.count() == 25 and own.chunks == 40
        tantivy = writer.search(query, 10)
        rescored = writer.search(query, 10, own)
        assert [m.chunk_id for m in rescored] == [m.chunk_id for m in tantivy]
        assert [m.score for m in rescored] == pytest.approx([m.score for m in tantivy], rel=1e-5)
    finally:
        writer.close()


def test_chunks_of_equal_score_rank_in_chunk_id_order_in_one_index_as_in_the_shards_merge(tmp_path):
    same = [Chunk(chunk_id=f"{name}#0", document_id=name, text="copper river", position=0) for name in "zamq"]
    other = [Chunk(chunk_id=f"b{i}#0", document_id=f"b{i}", text="ledger signal", position=0) for i in range(4)]
    whole, shard_a, shard_b = (index(tmp_path, "whole", same + other), index(tmp_path, "a", same[:2] + other),
                               index(tmp_path, "b", same[2:]))
    try:
        one = whole.search("copper", 3)  # written z, a, m, q: tantivy's own order would be that
        assert [m.chunk_id for m in one] == ["a#0", "m#0", "q#0"]
        total = summed(s.statistics("copper") for s in (shard_a, shard_b))
        merged = merge_by_score([s.search("copper", 3, total) for s in (shard_a, shard_b)], 3)
        assert [m.chunk_id for m in merged] == ["a#0", "m#0", "q#0"]
    finally:
        for i in (whole, shard_a, shard_b):
            i.close()


def test_summed_statistics_have_no_field_lengths_when_a_shard_holding_chunks_counted_none():
    counted = KeywordStatistics(chunks=3, lengths=[FieldTokens("text", 30), FieldTokens("title", 6)])
    empty = KeywordStatistics()  # a shard holding nothing counts nothing, rightly

    assert tokens(summed([counted, counted, empty])) == {"text": 60, "title": 12}
    assert summed([counted, KeywordStatistics(chunks=2)]).lengths == []  # a sender that does not count them
