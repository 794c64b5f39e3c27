"""The pieces of ``scripts/eval_rerank.py`` that its numbers rest on.

Its fused order must be document-rag's (else depth 10 without a reranker would not be the
configured hybrid it is compared with), and its token-level max-similarity, with the real MiniLM,
must rank a chunk about the question above one that is not, in each of its three ways.
"""

from __future__ import annotations

import numpy as np
import pytest

from processors.document_rag.fusion import fuse
from schema import ChunkMatch

from ..helpers.scripts import load_script

rerank = load_script("eval_rerank")


@pytest.mark.parametrize("method", ["minmax", "rrf"])
def test_fused_is_document_rags_order_with_the_scores_it_sums(method):
    vector = [ChunkMatch("a", 0.9), ChunkMatch("b", 0.7), ChunkMatch("c", 0.2), ChunkMatch("a", 0.1)]
    keyword = [ChunkMatch("c", 12.0), ChunkMatch("d", 3.0), ChunkMatch("b", 1.0)]
    got = rerank.fused([vector, keyword], [1.0, 1.0], method)
    assert [c for c, _ in got] == [m.chunk_id for m in fuse([vector, keyword], [1.0, 1.0], 10, method)]
    scores = [s for _, s in got]
    assert scores == sorted(scores, reverse=True)
    if method == "minmax":  # each chunk once per list (a's second place dropped), then min-max: 0.2..0.9, 1..12
        assert dict(got)["c"] == pytest.approx(0.0 + 1.0)
        assert dict(got)["b"] == pytest.approx(0.5 / 0.7 + 0.0)


@pytest.fixture(scope="module")
def token_vectors():
    return rerank.TokenVectors(threads=1)


def test_maxsim_ranks_the_chunk_about_the_question_first_in_each_way(token_vectors):
    question = "How do I catch an exception raised inside a with statement?"
    texts = {
        "on": "The try statement specifies exception handlers: an except clause catches the exception raised "
              "in the try suite, also inside a with statement's body.",
        "off": "Complex numbers have a real and imaginary part, which are each a floating point number.",
    }

    class Q:
        id = "q"

    Q.question = question
    methods = rerank.rerankers(token_vectors, [Q], texts, ["ctx", "ctx-stored", "qctx-static", "static"])
    for name, score in methods.items():
        (on, off), ms = score("q", ["on", "off"])
        assert on > off, name
        assert ms > 0
    ids, vectors = token_vectors.contextual(question)
    assert token_vectors.cls not in ids and token_vectors.sep not in ids
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert rerank.maxsim(vectors, vectors) == pytest.approx(1.0, abs=1e-5)  # every token finds itself
