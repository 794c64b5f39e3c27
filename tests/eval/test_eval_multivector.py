"""The pieces of ``scripts/eval_multivector.py`` that its numbers rest on.

A chunk's vector score must be its best window's (the windows of each chunk grouped, none lost
or given to a neighbour), the windows must cover the chunk's whole text within their size, and
with the real MiniLM a chunk whose one sentence answers the question must score higher by that
sentence than by its whole, diluted, vector.
"""

from __future__ import annotations

import numpy as np
import pytest

from processors.embed.onnx_backend import OnnxBackend, default_vocab_path, load_vocab
from processors.embed.settings import OnnxSettings
from processors.embed.wordpiece import WordPiece

from ..helpers.scripts import load_script

mv = load_script("eval_multivector")


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_a_chunk_scores_its_best_window_and_only_its_own():
    rng = np.random.default_rng(16)
    counts = [3, 1, 4, 2]  # windows of chunks 0..3, consecutive rows
    vectors = _unit(rng.normal(size=(sum(counts), 8)).astype(np.float32))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    owner = np.repeat(np.arange(len(counts)), counts)
    windows = mv.Windows(vectors, starts, owner, 0.0)
    question = vectors[5]  # chunk 2's second window
    got = mv.best_window(windows, question)
    want = [max(float(vectors[r] @ question) for r in range(len(owner)) if owner[r] == c) for c in range(4)]
    assert got == pytest.approx(want, abs=1e-6)
    assert int(np.argmax(got)) == 2 and got[2] == pytest.approx(1.0, abs=1e-6)
    whole = np.array([0.9, 0.1, 0.2, 0.3])
    assert mv.blended(got, whole, "0") == pytest.approx(got)
    assert mv.blended(got, whole, "1") == pytest.approx(whole)
    assert mv.blended(got, whole, "max") == pytest.approx(np.maximum(got, whole))
    assert [m.chunk_id for m in mv.top(list("adcb"), np.array([0.1, 0.5, 0.5, 0.9]), 3)] == ["b", "c", "d"]


def test_sentence_windows_slide_over_every_sentence():
    text = "One is here. Two is there.\n\nThree starts a paragraph. Four ends it. Five is last."
    assert mv.sentence_windows(text, 1) == ["One is here.", "Two is there.", "Three starts a paragraph.",
                                            "Four ends it.", "Five is last."]
    assert mv.sentence_windows(text, 2, 2) == ["One is here. Two is there.", "Three starts a paragraph. Four ends it.",
                                               "Four ends it. Five is last."]  # the last window reaches the end
    assert mv.sentence_windows(text, 9) == [" ".join(mv.sentence_windows(text, 1))]
    assert mv.sentence_windows("   ", 2) == ["   "]


def test_token_windows_fit_their_size_and_cover_every_word():
    tokenizer = WordPiece(load_vocab(default_vocab_path()), 10**6)
    text = " ".join(f"word{i} __slots__ except* PEP 570" for i in range(40))
    words = [w for w in tokenizer.words(text) if w]
    windows = mv.token_windows(text, tokenizer, 32, 16)
    assert len(windows) > 2
    covered = set()
    for w in windows:
        assert len(tokenizer.encode(w)) - 2 <= 32
        covered.update(w.split(" "))
    assert covered == set(words)
    assert windows[-1].split(" ")[-1] == words[-1]


@pytest.fixture(scope="module")
def backend():
    b = OnnxBackend(OnnxSettings(threads=1, optimized_cache="off"))
    b.load()
    return b


def test_a_chunk_scores_higher_by_the_sentence_that_answers(backend):
    filler = ("Complex numbers have a real and imaginary part, which are each a floating point number. "
              "The bitwise operators work on integers, shifting their bits left or right by a count. "
              "A string literal may be prefixed with r to turn off the meaning of backslashes. ") * 2
    answer = "The with statement calls the context manager's __exit__ method even when the block raises."
    texts = [filler + answer + " " + filler, "Integers have unlimited precision, floats are C doubles."]
    windows = mv.embed_windows(backend, texts, mv.windows_of("s1", None))
    assert list(np.bincount(windows.owner)) == [13, 1]
    question = backend.embed_sync(["Does leaving a with block through an exception still run the cleanup?"])[0]
    best, whole = mv.best_window(windows, question), backend.embed_sync(texts) @ question
    assert best[0] > whole[0] + 0.1  # the answer's sentence, not the diluted whole
    assert best[0] > best[1]
    assert best[1] == pytest.approx(whole[1], abs=1e-5)  # one sentence: its window is the chunk
