"""Fusion: several rankings of chunks into one.

- ``rrf_fuse``, weighted reciprocal rank fusion: ``score(chunk) = sum over
  lists of weight / (RRF_K + rank)``, rank counted from 1 in each list.
  K = 60, the value of the original RRF paper, damps the difference between
  the top ranks so that a chunk ranked well by two retrievers beats one
  ranked first by only one. Scores are ignored: only ranks count.
- ``score_fuse``, a convex combination of normalised retriever scores
  (``sum over lists of weight * norm(score)``, a chunk absent from a list
  adds 0 for it), which keeps how far ahead a retriever's first match is:
  ``minmax`` maps each list's scores onto [0, 1] (best = 1, worst = 0);
  ``dbsf`` (distribution-based score fusion) onto ``(score - (mean - 3 sd))
  / (6 sd)``, clipped to [0, 1], so one outlier does not squash the rest.
  BM25 and cosine scores live on different scales; normalising per list is
  what makes them addable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ragbus.schema import ChunkMatch

__all__ = ["FUSIONS", "RRF_K", "fuse", "rrf_fuse", "score_fuse"]

FUSIONS = ("rrf", "minmax", "dbsf")

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
    _check(ranked_lists, weights, limit)
    scores: dict[str, float] = {}
    first: dict[str, ChunkMatch] = {}
    order: dict[str, int] = {}
    for matches, weight in zip(ranked_lists, weights, strict=True):
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


def _check(ranked_lists: Sequence[Sequence[ChunkMatch]], weights: Sequence[float], limit: int) -> None:
    if len(weights) != len(ranked_lists):
        raise ValueError(f"{len(ranked_lists)} ranked lists but {len(weights)} weights")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, got {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")


def _first_per_id(matches: Sequence[ChunkMatch]) -> list[ChunkMatch]:
    """Each chunk id once, at its first (best) place; empty ids skipped."""
    seen: dict[str, ChunkMatch] = {}
    for match in matches:
        if match.chunk_id and match.chunk_id not in seen:
            seen[match.chunk_id] = match
    return list(seen.values())


def _normalised(scores: Sequence[float], method: str) -> list[float]:
    if not scores:
        return []
    if method == "minmax":
        low, high = min(scores), max(scores)
        if high - low <= 1e-12:
            return [1.0] * len(scores)  # one match, or all equal: each as good as the list's best
        return [(s - low) / (high - low) for s in scores]
    mean = statistics.fmean(scores)
    sd = statistics.pstdev(scores)
    if sd <= 1e-12:
        return [1.0] * len(scores)
    low = mean - 3 * sd
    return [min(1.0, max(0.0, (s - low) / (6 * sd))) for s in scores]


def score_fuse(ranked_lists: Sequence[Sequence[ChunkMatch]], weights: Sequence[float], limit: int,
               method: str = "minmax") -> list[ChunkMatch]:
    """The chunks of ``ranked_lists`` by the weighted sum of their normalised scores, at most ``limit``.

    ``method``: ``minmax`` or ``dbsf`` (module docstring). Each list must be
    best first with higher scores better (cosine similarity, BM25); a chunk
    repeated within one list counts at its first place only. Ties are broken
    by first appearance (lists in the order given), so the result is
    deterministic. The returned matches are the inputs themselves, as in
    ``rrf_fuse``.
    """
    if method not in ("minmax", "dbsf"):
        raise ValueError(f"unknown score fusion {method!r}; use minmax or dbsf")
    _check(ranked_lists, weights, limit)
    scores: dict[str, float] = {}
    first: dict[str, ChunkMatch] = {}
    order: dict[str, int] = {}
    for matches, weight in zip(ranked_lists, weights, strict=True):
        unique = _first_per_id(matches)
        for match, norm in zip(unique, _normalised([float(m.score) for m in unique], method), strict=True):
            chunk_id = match.chunk_id
            if chunk_id not in first:
                first[chunk_id] = match
                order[chunk_id] = len(order)
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight * norm
    ranked = sorted(scores, key=lambda c: (-scores[c], order[c]))
    return [first[c] for c in ranked[:limit]]


def fuse(ranked_lists: Sequence[Sequence[ChunkMatch]], weights: Sequence[float], limit: int,
         method: str = "rrf") -> list[ChunkMatch]:
    """``rrf_fuse`` for ``rrf``, else ``score_fuse`` with ``method``."""
    if method == "rrf":
        return rrf_fuse(ranked_lists, weights, limit)
    if method not in FUSIONS:
        raise ValueError(f"unknown fusion {method!r}; use one of {', '.join(FUSIONS)}")
    return score_fuse(ranked_lists, weights, limit, method)
