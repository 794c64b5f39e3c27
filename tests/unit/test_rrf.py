"""Weighted reciprocal rank fusion: the formula, first-seen matches, ties, limits and bad arguments."""

from __future__ import annotations

import pytest

from ragbus.document_rag import RRF_K, rrf_fuse
from ragbus.schema import ChunkMatch


def ids(matches: list[ChunkMatch]) -> list[str]:
    return [m.chunk_id for m in matches]


def ranked(*chunk_ids: str) -> list[ChunkMatch]:
    return [ChunkMatch(c) for c in chunk_ids]


def test_rrf_k_is_60_and_exported_by_the_package():
    from ragbus.document_rag import DocumentRag  # noqa: F401  (the package exports all three)

    assert RRF_K == 60


def test_weighted_scores_match_the_formula():
    vector = ranked("a", "b", "c")
    keyword = ranked("c", "a", "d")
    # score = sum of weight / (60 + rank), rank from 1; weights 1.0 (vector) and 0.5 (keyword):
    expected = {
        "a": 1.0 / (60 + 1) + 0.5 / (60 + 2),  # 0.024458
        "b": 1.0 / (60 + 2),  # 0.016129
        "c": 1.0 / (60 + 3) + 0.5 / (60 + 1),  # 0.024070
        "d": 0.5 / (60 + 3),  # 0.007937
    }
    assert sorted(expected, key=lambda c: -expected[c]) == ["a", "c", "b", "d"]

    assert ids(rrf_fuse([vector, keyword], [1.0, 0.5], 10)) == ["a", "c", "b", "d"]


def test_chunk_ranked_by_two_lists_beats_one_ranked_first_by_one():
    # b: 1/62 + 1/62 = 0.032258 > a = c = 1/61 = 0.016393
    assert ids(rrf_fuse([ranked("a", "b"), ranked("c", "b")], [1.0, 1.0], 10)) == ["b", "a", "c"]


def test_weights_change_the_winner():
    vector = ranked("x", "y")
    keyword = ranked("y", "x")
    # vector 1.0, keyword 0.5: x = 1/61 + 0.5/62 = 0.024458 > y = 1/62 + 0.5/61 = 0.024326
    assert 1.0 / 61 + 0.5 / 62 > 1.0 / 62 + 0.5 / 61
    assert ids(rrf_fuse([vector, keyword], [1.0, 0.5], 10)) == ["x", "y"]
    # vector 0.5, keyword 1.0: x = 0.5/61 + 1/62 = 0.024326 < y = 0.5/62 + 1/61 = 0.024458
    assert ids(rrf_fuse([vector, keyword], [0.5, 1.0], 10)) == ["y", "x"]


@pytest.mark.parametrize(("factor", "winner"), [(1.0001, "y"), (0.9999, "x")])
def test_the_denominator_is_k_plus_rank_counted_from_1(factor, winner):
    # x: 1.0 / (60 + 1); y, second in the other list: w / (60 + 2). They tie at w = 62/61, so a
    # weight just above it must make y win and just below make x win. With ranks counted from 0
    # (or K = 59) the tie would be at 61/60, with K = 61 at 63/62: both outside [0.9999, 1.0001] * 62/61.
    w = 62 / 61 * factor
    fused = rrf_fuse([ranked("x"), ranked("z", "y")], [1.0, w], 10)

    assert ids(fused)[0] == "z"  # w / 61
    assert ids(fused)[1] == winner


def test_zero_weight_list_only_contributes_its_chunks_at_the_end():
    assert ids(rrf_fuse([ranked("a", "b"), ranked("z", "b")], [1.0, 0.0], 10)) == ["a", "b", "z"]


def test_ties_are_broken_by_first_appearance():
    # a and c both score 1/61 exactly
    assert ids(rrf_fuse([ranked("a"), ranked("c")], [1.0, 1.0], 10)) == ["a", "c"]
    assert ids(rrf_fuse([ranked("c"), ranked("a")], [1.0, 1.0], 10)) == ["c", "a"]
    # p = 1/61 + 1/62 = q = 1/62 + 1/61: p is seen first, every time
    lists = [ranked("p", "q"), ranked("q", "p")]
    assert ids(rrf_fuse(lists, [1.0, 1.0], 10)) == ["p", "q"] == ids(rrf_fuse(lists, [1.0, 1.0], 10))


def test_keeps_the_exact_first_seen_match_per_chunk_id():
    from_vector = ChunkMatch("a", score=0.91, text="vector text", document_id="doc-v")
    from_keyword = ChunkMatch("a", score=12.5, text="keyword text", document_id="doc-k")
    other = ChunkMatch("b", score=3.0)

    fused = rrf_fuse([[from_vector], [from_keyword, other]], [1.0, 1.0], 10)

    assert fused[0] is from_vector
    assert fused[1] is other
    assert from_vector.score == 0.91  # the retriever's score is left alone

    fused = rrf_fuse([[from_keyword, other], [from_vector]], [1.0, 1.0], 10)
    assert fused[0] is from_keyword


def test_each_chunk_appears_once_and_a_repeat_in_one_list_is_not_counted_twice():
    first = ChunkMatch("a", text="first")
    repeat = ChunkMatch("a", text="repeat")
    # counted once: a = 1/61 = 0.016393 < b = 1.2/61 = 0.019672
    # (counted twice it would be 1/61 + 1/62 = 0.032522 and win)
    fused = rrf_fuse([[first, repeat], ranked("b")], [1.0, 1.2], 10)

    assert ids(fused) == ["b", "a"]
    assert fused[1] is first


def test_skips_matches_with_an_empty_chunk_id():
    fused = rrf_fuse([[ChunkMatch(""), ChunkMatch("a")], [ChunkMatch("b"), ChunkMatch("")]], [1.0, 1.0], 10)

    assert ids(fused) == ["a", "b"]


def test_truncates_to_limit_after_fusing():
    vector = ranked("a", "b", "c")
    keyword = ranked("c", "b", "a")
    # a = c = 1/61 + 1/63 = 0.032266 (a seen first) > b = 2/62 = 0.032258
    assert 1 / 61 + 1 / 63 > 2 / 62
    assert ids(rrf_fuse([vector, keyword], [1.0, 1.0], 2)) == ["a", "c"]
    assert ids(rrf_fuse([vector, keyword], [1.0, 1.0], 1)) == ["a"]


def test_limit_zero_gives_nothing():
    assert rrf_fuse([ranked("a", "b")], [1.0], 0) == []


def test_no_lists_or_empty_lists_give_nothing():
    assert rrf_fuse([], [], 5) == []
    assert rrf_fuse([[], []], [1.0, 1.0], 5) == []


@pytest.mark.parametrize("weights", [[1.0], [1.0, 1.0, 1.0], []])
def test_weights_must_match_the_lists(weights):
    with pytest.raises(ValueError):
        rrf_fuse([ranked("a"), ranked("b")], weights, 5)


@pytest.mark.parametrize("limit", [True, False, 2.0, "3", None])
def test_limit_must_be_an_int_not_a_bool(limit):
    with pytest.raises(TypeError):
        rrf_fuse([ranked("a")], [1.0], limit)


def test_negative_limit_is_rejected():
    with pytest.raises(ValueError):
        rrf_fuse([ranked("a")], [1.0], -1)


# --- score-based fusion (minmax, dbsf) beside RRF ------------------------------------------------

from ragbus.document_rag.fusion import FUSIONS, fuse, score_fuse  # noqa: E402


def scored(*pairs: tuple[str, float]) -> list[ChunkMatch]:
    return [ChunkMatch(c, score=s) for c, s in pairs]


def test_minmax_fusion_is_the_weighted_sum_of_min_max_normalised_scores():
    vector = scored(("a", 0.9), ("b", 0.5), ("c", 0.1))  # normalised 1, 0.5, 0
    keyword = scored(("c", 30.0), ("d", 20.0), ("a", 10.0))  # normalised 1, 0.5, 0
    # a: 1*1 + 2*0 = 1.0; b: 0.5; c: 0 + 2*1 = 2.0; d: 2*0.5 = 1.0 (a first: seen first)
    assert ids(score_fuse([vector, keyword], [1.0, 2.0], 10)) == ["c", "a", "d", "b"]
    assert ids(score_fuse([vector, keyword], [1.0, 2.0], 2)) == ["c", "a"]


def test_scores_matter_where_ranks_alone_would_tie():
    # RRF sees "a" first in one list and "x" first in the other: a tie by rank, broken by order.
    vector = scored(("a", 0.50), ("x", 0.49), ("z", 0.10))  # the vector side hardly separates a and x
    keyword = scored(("x", 12.0), ("a", 1.0), ("w", 0.5))  # the keyword side does, by far
    assert ids(rrf_fuse([vector, keyword], [1.0, 1.0], 2)) == ["a", "x"]
    assert ids(score_fuse([vector, keyword], [1.0, 1.0], 2)) == ["x", "a"]


def test_dbsf_clips_to_three_standard_deviations():
    scores = [("a", 100.0)] + [(f"n{i}", 1.0 + i / 100) for i in range(20)]
    fused = score_fuse([scored(*scores)], [1.0], 21, "dbsf")
    assert ids(fused)[0] == "a" and len(fused) == 21


def test_score_fusion_takes_each_chunk_once_keeps_inputs_and_handles_flat_lists():
    first = ChunkMatch("a", score=1.0, text="first")
    fused = score_fuse([[first, ChunkMatch("a", score=0.5), ChunkMatch("", score=9.0)], scored(("a", 3.0))], [1, 1], 5)
    assert fused == [first] and fused[0] is first
    assert ids(score_fuse([scored(("a", 2.0), ("b", 2.0))], [1.0], 5)) == ["a", "b"]  # all equal: order kept
    assert score_fuse([[], []], [1.0, 1.0], 5) == []


def test_fuse_names_its_methods_and_rrf_stays_rrf():
    assert FUSIONS == ("rrf", "minmax", "dbsf")
    lists = [scored(("a", 0.5), ("x", 0.49)), scored(("x", 12.0), ("a", 1.0))]
    assert fuse(lists, [1.0, 1.0], 2, "rrf") == rrf_fuse(lists, [1.0, 1.0], 2)
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(lists, [1.0, 1.0], 2, "borda")
    with pytest.raises(ValueError, match="weights"):
        score_fuse(lists, [1.0], 2)
    with pytest.raises(ValueError, match="limit"):
        score_fuse(lists, [1.0, 1.0], -1)
