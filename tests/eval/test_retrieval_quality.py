"""Regression guard: hybrid retrieval recalls no less than the better single mode, on a fixed slice.

The slice is 30 questions of ``scripts/eval/questions.jsonl``, 10 of each
kind, picked by position in the file (``evalset.stratified_slice``), never
by result. The whole pipeline runs as ``scripts/eval_retrieval.py`` runs
it: the Python language reference ingested through the chunker, the
embedder and both stores on a memory bus (about 40 s on 2 cores, once),
then every question asked of document-rag in vector, keyword and hybrid
mode with the configured defaults; recall@5 by ir-measures. A guard, not a
tuning target: if it fails, the fusion or a retriever got worse.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLICE = 30
SINGLE = ("vector", "keyword")


def _load_harness():
    spec = importlib.util.spec_from_file_location("eval_retrieval", ROOT / "scripts" / "eval_retrieval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("eval_retrieval", module)
    spec.loader.exec_module(module)
    return module


harness = _load_harness()
evalset = harness.evalset


def test_the_set_is_whole_and_every_evidence_passage_is_in_a_chunk():
    questions = evalset.load_questions()
    assert len(questions) >= 150
    relevant = evalset.resolve(questions, evalset.corpus_chunks())  # raises naming any passage not found
    assert all(relevant[q.id] for q in questions)
    picked = evalset.stratified_slice(questions, SLICE)
    assert len({q.id for q in picked}) == SLICE
    assert {k: sum(q.kind == k for q in picked) for k in evalset.KINDS} == dict.fromkeys(evalset.KINDS, SLICE // 3)


@pytest.mark.timeout(900)
async def test_hybrid_recall_at_5_is_no_worse_than_the_best_single_mode(tmp_path):
    questions = evalset.stratified_slice(evalset.load_questions(), SLICE)
    lines, numbers, runs = await harness.evaluate(questions, [*SINGLE, "hybrid"], data_dir=tmp_path)
    table = "\n".join(lines)
    assert runs.problems == [], runs.problems
    for mode in (*SINGLE, "hybrid"):  # every question answered with a full ranking: the metrics mean something
        assert [len(runs.ranked[mode][q.id]) for q in questions] == [harness.K] * SLICE, mode
    recall = {mode: numbers["rows"][f"all/{mode}"]["R@5"] for mode in (*SINGLE, "hybrid")}
    best = max(SINGLE, key=recall.__getitem__)
    assert recall["hybrid"] >= recall[best] - 1e-9, f"hybrid recall@5 {recall['hybrid']:.3f} < {best} {recall[best]:.3f}\n{table}"
