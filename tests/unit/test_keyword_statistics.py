"""A sharded collection's BM25: shards that score with the statistics of them all score as one index would.

Chunks of equal length (BM25's length normalisation, which stays each shard's own, is then the same
everywhere) are split over two indexes; with the summed statistics of the query's terms each shard gives
every chunk the score the one index holding them all gives it, so the merged ranking is that index's.
With its own statistics alone a shard's scores differ.
"""

from __future__ import annotations

import random

import pytest

from ragbus.document_rag.shards import merge_by_score, summed
from ragbus.schema import Chunk
from ragbus.stores.keywords.index import KeywordIndex
from ragbus.stores.keywords.settings import KeywordSettings

WORDS = ["harbour", "ledger", "copper", "river", "signal", "garden", "winter", "lantern", "pepper", "violet",
         "marble", "canyon", "falcon", "meadow", "quartz", "saddle"]


def chunks(n: int, seed: int = 3) -> list[Chunk]:
    rng = random.Random(seed)
    out = []
    for i in range(n):  # eight words each, the title two: every chunk the same length in every field
        text = " ".join(rng.choice(WORDS[: 4 + i % 12]) for _ in range(8))
        title = " ".join(rng.choice(WORDS) for _ in range(2))
        out.append(Chunk(chunk_id=f"d{i}#0", document_id=f"d{i}", text=text, title=title, position=0))
    return out


def index(tmp_path, name: str, held: list[Chunk]) -> KeywordIndex:
    writer = KeywordIndex.open_writer(tmp_path / name, "default", KeywordSettings())
    writer.upsert(held)
    writer.commit()
    return writer


@pytest.mark.parametrize("query", ["harbour ledger", "copper river signal", "quartz", "winter lantern pepper violet"])
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
