"""Regression guard: hybrid retrieval (the configured default mode) is no worse than the better single mode.

The slice is 30 questions of the test half of ``scripts/eval/questions.jsonl``
(the half no setting was chosen on), 10 of each kind, picked by
position in the file (``evalset.stratified_slice``), never by result. The
whole pipeline runs as ``python -m scripts.eval_retrieval`` runs it: the Python
language reference ingested through document-load, the embedder and both
stores on a memory bus (about 40 s on 2 cores, once), then every question
asked of document-rag in vector, keyword and hybrid mode with the
configured defaults (hybrid: its configured fusion); recall@5 and nDCG@10
by ir-measures. A guard, not a tuning target: if it fails, the fusion or a
retriever got worse.
"""

from __future__ import annotations

import pytest

from scripts import eval_retrieval as harness
from scripts.eval import evalset

SLICE = 30
SINGLE = ("vector", "keyword")
METRICS = ("R@5", "nDCG@10")



def guarded() -> list:
    return evalset.stratified_slice(evalset.of_split(evalset.load_questions(), "test"), SLICE)


def test_the_set_is_whole_and_every_evidence_passage_is_in_a_chunk():
    questions = evalset.load_questions()
    assert len(questions) >= 150
    relevant = evalset.resolve(questions, evalset.corpus_chunks())  # raises naming any passage not found
    assert all(relevant[q.id] for q in questions)
    picked = guarded()
    assert len({q.id for q in picked}) == SLICE
    assert {k: sum(q.kind == k for q in picked) for k in evalset.KINDS} == dict.fromkeys(evalset.KINDS, SLICE // 3)
    assert {q.split for q in picked} == {"test"}


def test_the_split_is_fixed_halved_by_kind_and_the_one_drawn_with_its_seed():
    questions = evalset.load_questions()
    assert all(q.split in evalset.SPLITS for q in questions)
    assert {q.id: q.split for q in questions} == evalset.assign_split(questions)  # stored = drawn with the seed
    for kind in evalset.KINDS:
        dev = sum(q.split == "dev" for q in questions if q.kind == kind)
        test = sum(q.split == "test" for q in questions if q.kind == kind)
        assert 0 <= dev - test <= 1, kind


def test_hybrid_is_the_configured_default_mode():
    from ragbus.config.settings import load_settings, processor_settings
    from ragbus.document_rag import DocumentRag
    from ragbus.document_rag.settings import DocumentRagSettings

    configured = processor_settings(load_settings(environ={}), "document-rag", DocumentRagSettings)
    assert configured.retrieval_mode == "hybrid"
    import inspect

    # The class built by hand keeps the user's seed 000: vector, the keyword path strictly opt-in; the
    # deployed processor passes its configured mode (tests/unit/test_defaults_once.py).
    assert inspect.signature(DocumentRag).parameters["retrieval_mode"].default == "vector"


@pytest.mark.timeout(900)
async def test_hybrid_recall_at_5_and_ndcg_at_10_are_no_worse_than_the_best_single_mode(tmp_path):
    questions = guarded()
    lines, numbers, runs = await harness.evaluate(questions, [*SINGLE, "hybrid"], data_dir=tmp_path)
    table = "\n".join(lines)
    assert runs.problems == [], runs.problems
    for mode in (*SINGLE, "hybrid"):  # every question answered with a full ranking: the metrics mean something
        assert [len(runs.ranked[mode][q.id]) for q in questions] == [harness.K] * SLICE, mode
    for metric in METRICS:
        value = {mode: numbers["rows"][f"all/{mode}"][metric] for mode in (*SINGLE, "hybrid")}
        best = max(SINGLE, key=value.__getitem__)
        assert value["hybrid"] >= value[best] - 1e-9, (
            f"hybrid {metric} {value['hybrid']:.3f} < {best} {value[best]:.3f}\n{table}")
