"""Weighted reciprocal rank fusion: several rankings of chunks into one.

``score(chunk) = sum over lists of weight / (RRF_K + rank)``, rank counted
from 1 in each list. K = 60, the value of the original RRF paper, damps the
difference between the top ranks so that a chunk ranked well by two
retrievers beats one ranked first by only one.
"""

from __future__ import annotations

from collections.abc import Sequence

from schema import ChunkMatch

__all__ = ["RRF_K", "rrf_fuse"]

RRF_K = 60


def rrf_fuse(ranked_lists: Sequence[Sequence[ChunkMatch]], weights: Sequence[float], limit: int) -> list[ChunkMatch]:
    """The chunks of ``ranked_lists`` by fused score, at most ``limit``.

    Keeps the first-seen ``ChunkMatch`` of each chunk id (lists in the order
    given, each best first); matches with an empty chunk id are skipped; a
    chunk repeated within one list counts at its best rank only. Ties are
    broken by first appearance, so the result is deterministic. The returned
    matches are the inputs themselves, not copies: their ``score`` is the
    retriever's, not the fused one.
    """
    if len(weights) != len(ranked_lists):
        raise ValueError(f"{len(ranked_lists)} ranked lists but {len(weights)} weights")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, got {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")
    scores: dict[str, float] = {}
    first: dict[str, ChunkMatch] = {}
    order: dict[str, int] = {}
    for matches, weight in zip(ranked_lists, weights):
        seen_here: set[str] = set()
        rank = 0
        for match in matches:
            chunk_id = match.chunk_id
            if not chunk_id:
                continue
            rank += 1
            if chunk_id in seen_here:
                continue
            seen_here.add(chunk_id)
            if chunk_id not in first:
                first[chunk_id] = match
                order[chunk_id] = len(order)
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (RRF_K + rank)
    ranked = sorted(scores, key=lambda c: (-scores[c], order[c]))
    return [first[c] for c in ranked[:limit]]
