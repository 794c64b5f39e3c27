"""Retrieval measures of a run against the chunks relevant to each question, computed by ir-measures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def measures():
    from ir_measures import RR, R, nDCG

    return {"nDCG@10": nDCG @ 10, "R@5": R @ 5, "MRR@10": RR @ 10}


def per_question(
    relevant: Mapping[str, Sequence[str]], ranked: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """Metric name -> question id -> value, by ir-measures; a question with nothing retrieved scores 0."""
    import ir_measures

    wanted = measures()
    qrels = [ir_measures.Qrel(qid, cid, 1) for qid, cids in relevant.items() for cid in cids]
    run = [ir_measures.ScoredDoc(qid, cid, float(len(ids) - rank))  # strictly decreasing: no ties to re-sort
           for qid, ids in ranked.items() for rank, cid in enumerate(dict.fromkeys(ids))]
    by_measure = {str(m): name for name, m in wanted.items()}
    values: dict[str, dict[str, float]] = {name: dict.fromkeys(relevant, 0.0) for name in wanted}
    for metric in ir_measures.iter_calc(list(wanted.values()), qrels, run):
        values[by_measure[str(metric.measure)]][metric.query_id] = float(metric.value)
    return values
