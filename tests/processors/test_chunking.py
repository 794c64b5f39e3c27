"""Chunk boundaries, overlap and stable ids."""

from __future__ import annotations

import itertools
import random

import pytest

from ragbus.document_load import chunk_document, split_text
from ragbus.document_load.chunking import chunk_part, split_part
from ragbus.schema import Document

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
    for a, b in itertools.pairwise(pieces):
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
    with pytest.raises(ValueError, match=r"chunk size|overlap"):
        split_text(TEXT, size, overlap)


def test_blank_text_has_no_chunks():
    assert split_text("  \n\n ", 100, 10) == []


# --- a large document in parts: the same chunks wherever the parts were cut ---------------------------

PIECES = ["alpha", "beta.", "gamma!", "delta?", "\n\n", "  ", "\n", "x" * 120, "é", "naïve", "\t", "end."]


def split_in_parts(text: str, size: int, overlap: int, rng: random.Random) -> list[str]:
    """What document-load settles part by part, each part as long as a random sender makes it."""
    pieces, offset, first = [], 0, True
    while True:
        length = rng.randint(size + 1, size * 6)
        part = text[offset : offset + length]
        last = offset + length >= len(text)
        got, resume_at = split_part(part, size, overlap, first=first, last=last)
        pieces += got
        if last:
            return pieces
        if resume_at == 0:
            return None  # a part shorter than a chunk's window after its trailing space: no progress
        offset, first = offset + resume_at, False


@pytest.mark.parametrize("seed", range(8))
def test_a_document_cut_into_parts_anywhere_gives_the_chunks_of_the_whole(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(250):
        text = "".join(rng.choice(PIECES) + rng.choice([" ", "", "  "]) for _ in range(rng.randint(0, 400)))
        if rng.random() < 0.3:
            text = "   \n" + text + "\n\n   "
        size = rng.randint(20, 200)
        overlap = rng.randint(0, size - 1)
        parts = split_in_parts(text, size, overlap, rng)
        if parts is not None:
            assert parts == split_text(text, size, overlap), (seed, size, overlap, text[:80])
            checked += 1
    assert checked > 200


def test_a_part_settles_only_the_chunks_whose_window_it_holds():
    pieces, resume_at = split_part(TEXT[:1000], 300, 50, first=True, last=False)
    whole = split_text(TEXT, 300, 50)
    assert pieces == whole[: len(pieces)] and pieces
    assert 0 < resume_at < 1000 and TEXT[resume_at:].lstrip().startswith(whole[len(pieces)][:30])
    # The last part settles everything, and a part with no room for a window settles nothing.
    assert split_part(TEXT, 300, 50, last=True) == (whole, len(TEXT))
    assert split_part(TEXT[:200], 300, 50, first=False, last=False) == ([], 0)


def test_chunk_ids_of_a_later_part_continue_from_its_first_position():
    doc = Document(document_id="big", text=TEXT[:1000], part=3, last=False, first_position=40)
    chunks, _ = chunk_part(doc, 300, 50)
    assert [c.chunk_id for c in chunks] == [f"big#{40 + i}" for i in range(len(chunks))]
    assert [c.position for c in chunks] == list(range(40, 40 + len(chunks)))

