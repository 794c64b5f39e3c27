"""Chunk boundaries, overlap and stable ids."""

from __future__ import annotations

import pytest

from processors.chunker import chunk_document, split_text
from schema import Document

TEXT = " ".join(f"Sentence number {i} says something about topic {i % 7}." for i in range(200))


def test_chunks_respect_size_and_cover_the_text():
    pieces = split_text(TEXT, 300, 50)
    assert all(len(p) <= 300 for p in pieces)
    words = set(TEXT.split())
    assert set(" ".join(pieces).split()) == words  # nothing lost


def test_chunks_end_on_sentence_boundaries_when_one_is_near():
    pieces = split_text(TEXT, 300, 50)
    assert all(p.endswith(".") for p in pieces[:-1])


def test_neighbours_overlap():
    pieces = split_text(TEXT, 300, 80)
    for a, b in zip(pieces, pieces[1:]):
        assert b.split()[0] in a.split()[-20:], (a[-60:], b[:60])


def test_ids_are_stable_and_positional():
    doc = Document(document_id="doc-1", text=TEXT, title="T", collection="c")
    first, again = chunk_document(doc, 300, 50), chunk_document(doc, 300, 50)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again] == [f"doc-1#{i}" for i in range(len(first))]
    assert all(c.title == "T" and c.collection == "c" and c.document_id == "doc-1" for c in first)


def test_a_word_longer_than_a_chunk_is_cut_not_lost():
    pieces = split_text("x" * 1000, 300, 0)
    assert "".join(pieces) == "x" * 1000


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (100, 100), (100, -1)])
def test_bad_sizes_are_named(size, overlap):
    with pytest.raises(ValueError, match="chunk size|overlap"):
        split_text(TEXT, size, overlap)


def test_blank_text_has_no_chunks():
    assert split_text("  \n\n ", 100, 10) == []
