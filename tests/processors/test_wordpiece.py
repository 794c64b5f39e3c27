"""The embed processor's own WordPiece tokenizer gives, id for id, what the ``tokenizers`` package gives.

The stored vectors were made with ``tokenizers``' BertWordPieceTokenizer over this vocabulary; a single
id of difference would move a vector. ``tokenizers`` is a test dependency only, as the reference.
"""

from __future__ import annotations

import hashlib
import json
import pydoc_data.topics
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tokenizers import BertWordPieceTokenizer

from processors.chunker.chunking import split_text
from processors.chunker.settings import ChunkerSettings
from processors.embed.onnx_backend import default_vocab_path, load_vocab
from processors.embed.settings import OnnxSettings
from processors.embed.wordpiece import WordPiece

ROOT = Path(__file__).resolve().parents[2]
MAX_TOKENS = OnnxSettings().max_tokens


@pytest.fixture(scope="module")
def vocab() -> dict[str, int]:
    return load_vocab(default_vocab_path())


@pytest.fixture(scope="module")
def ours(vocab) -> WordPiece:
    return WordPiece(vocab, MAX_TOKENS)


@pytest.fixture(scope="module")
def reference(vocab) -> BertWordPieceTokenizer:
    # The settings onnx_backend used with tokenizers, before it had a tokenizer of its own.
    tokenizer = BertWordPieceTokenizer(
        vocab, unk_token="[UNK]", sep_token="[SEP]", cls_token="[CLS]", pad_token="[PAD]", mask_token="[MASK]",
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True,
    )
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    return tokenizer


def _first_difference(texts: list[str], ours: WordPiece, reference: BertWordPieceTokenizer) -> str | None:
    expected = [e.ids for e in reference.encode_batch(texts)]
    for text, want in zip(texts, expected):
        got = ours.encode(text)
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            return f"{text[:80]!r}: first difference at token {at}: {got[at:at + 5]} != {want[at:at + 5]}"
    return None


def test_the_shipped_vocabulary_is_the_one_its_readme_names(vocab):
    path = default_vocab_path()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest in (ROOT / "config" / "embed" / "README.md").read_text()
    assert len(vocab) == 30522 and vocab["[PAD]"] == 0 and vocab["[UNK]"] == 100 and vocab["[CLS]"] == 101


def test_every_chunk_of_the_default_corpus_tokenizes_as_the_reference_does(ours, reference):
    chunking = ChunkerSettings()
    texts = [c for t in pydoc_data.topics.topics.values() for c in split_text(t, chunking.chunk_size,
                                                                                chunking.chunk_overlap)]
    texts += list(pydoc_data.topics.topics.values())  # whole topics: truncation at max_tokens
    assert len(texts) > 500
    assert _first_difference(texts, ours, reference) is None


def test_the_eval_questions_tokenize_as_the_reference_does(ours, reference):
    lines = (ROOT / "scripts" / "eval" / "questions.jsonl").read_text().splitlines()
    questions = [json.loads(line)["question"] for line in lines if line.strip()]
    assert len(questions) >= 190
    assert _first_difference(questions, ours, reference) is None


TRICKY = [
    "",
    "   ",
    "ΟΔΟΣ ΣΟΦΙΑΣ",  # no final-sigma rule: each character is lowercased alone
    "İstanbul Straße café naïve Ǆemal ﬁnal Ⅻ ½",
    "東京タワー 北京 한국어 ไทย",
    "nul\x00 del\x7f sep\x1c zero\u200bwidth bom\ufeff repl\ufffd",
    "tabs\tnew\nlines\r\nnbsp\xa0ideo\u3000graphic",
    "x\u0301\u0327 a\u20dd combining",
    "“quotes” — dashes … ellipsis ‹›«» ¿¡ §¶ $+<=>^`| ~",
    "a" * 101 + " " + "b" * 100,  # over 100 characters a word is [UNK]; 100 is still split
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "word " * 400,  # truncated to max_tokens
]


@pytest.mark.parametrize("text", TRICKY)
def test_edge_cases_tokenize_as_the_reference_does(text, ours, reference):
    assert _first_difference([text], ours, reference) is None


# Assigned characters only: Python's Unicode database (14.0) and the Rust crate's (newer) agree on those.
_TEXT = st.text(st.characters(blacklist_categories=("Cn", "Cs", "Co")), max_size=300)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT)
@example(text="Ab\u0130c\u03a3.")
def test_any_text_tokenizes_as_the_reference_does(text, ours, reference):
    assert _first_difference([text], ours, reference) is None
