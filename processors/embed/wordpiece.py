"""BERT uncased WordPiece tokenization: text to the token ids all-MiniLM-L6-v2 was trained on.

Written here rather than taken from the ``tokenizers`` package because that
package requires ``huggingface-hub``, which brings a further ten packages
(an HTTP stack, click, tqdm, pyyaml, fsspec, hf-xet...) that ragbus never
uses; the algorithm itself is small and fixed. The ids must be exactly those
of the tokenizer the model was exported with (``BertNormalizer`` with
clean_text, Chinese characters padded, accents stripped, lowercase;
``BertPreTokenizer``; ``WordPiece`` with ``##`` continuations and words over
100 characters unknown; ``[CLS]``, ``[SEP]``, ``[UNK]``, ``[PAD]`` and
``[MASK]`` written in a text are those tokens), or the vectors would drift
from the stored ones: ``tests/processors/test_wordpiece.py`` compares every
id against ``tokenizers`` on the whole default corpus, on every assigned
character and on generated text. Characters are classified by Python's
Unicode database (14.0 in 3.11); the reference's tables are older, so about
500 characters assigned since (marks and punctuation of newer scripts, none
in the default corpus) are dropped or split here where it keeps them.

Speed: each distinct character is classified once (a ``str.translate``
table that grows as characters are met), and each distinct word is split
into pieces once (a bounded cache), so tokenizing a corpus costs little more
than two passes of ``str.translate`` over it.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from pathlib import Path

MAX_WORD_CHARS = 100  # a longer word is [UNK], as in the model's tokenizer
# Written in a text exactly so, these are the special token, as the reference matches them before normalising.
SPECIAL = ("[UNK]", "[SEP]", "[CLS]", "[PAD]", "[MASK]")
# What Rust's char::is_whitespace calls whitespace (the Unicode White_Space property); HF's BertNormalizer
# turns these into spaces. Python's str.isspace differs on a few control characters.
_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def _is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c)[0] == "C"


def _is_chinese(cp: int) -> bool:
    # The CJK Unified Ideographs blocks BERT pads with spaces (not Japanese kana or Korean hangul), as the
    # reference lists them: Extension E from U+2B920, where Google's BERT said U+2B820.
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B920 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _is_punctuation(c: str) -> bool:
    return (c.isascii() and c.isprintable() and not c.isalnum() and c != " ") or unicodedata.category(c)[0] == "P"


class _Clean(dict):
    """``str.translate`` table of the normalizer's first pass: drop controls, spaces for whitespace, pad CJK."""

    def __missing__(self, cp: int):
        c = chr(cp)
        if cp == 0 or cp == 0xFFFD or _is_control(c):
            out = None
        elif c in _WHITESPACE:
            out = " "
        elif _is_chinese(cp):
            out = f" {c} "
        else:
            out = c
        self[cp] = out
        return out


class _Fold(dict):
    """Second pass, after NFD: drop combining marks (accents), lowercase each character, isolate punctuation."""

    def __missing__(self, cp: int):
        c = chr(cp)
        if unicodedata.category(c) == "Mn":
            out = None
        else:
            # Character by character, as the model's tokenizer does: no final-sigma rule.
            out = "".join(f" {x} " if _is_punctuation(x) else x for x in c.lower())
        self[cp] = out
        return out


class WordPiece:
    """Token ids of texts, ``[CLS]`` first and ``[SEP]`` last, truncated to ``max_tokens`` in all."""

    def __init__(self, vocab: dict[str, int], max_tokens: int) -> None:
        self.vocab = vocab
        self.max_tokens = max_tokens
        self.unk, self.cls, self.sep = vocab["[UNK]"], vocab["[CLS]"], vocab["[SEP]"]
        self._special = {token: vocab[token] for token in SPECIAL if token in vocab}
        self._special_split = re.compile("(" + "|".join(map(re.escape, self._special)) + ")").split
        self._clean = _Clean()
        self._fold = _Fold()
        self.pieces = lru_cache(maxsize=65536)(self._pieces)

    @classmethod
    def from_file(cls, path: Path, max_tokens: int) -> WordPiece:
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return cls({line: i for i, line in enumerate(lines)}, max_tokens)

    def words(self, text: str) -> list[str]:
        """The normalised, pre-tokenized words of ``text``."""
        text = text.translate(self._clean)
        if not text.isascii():
            text = unicodedata.normalize("NFD", text)
        return text.translate(self._fold).split(" ")

    def encode(self, text: str) -> list[int]:
        room = self.max_tokens - 2
        ids = [self.cls]
        parts = self._special_split(text) if "[" in text else [text]  # text, special token, text, ...
        for i, part in enumerate(parts):
            if i % 2:
                ids.append(self._special[part])
            else:
                for word in self.words(part):
                    if word:
                        ids.extend(self.pieces(word))
                        if len(ids) > room:
                            break
            if len(ids) > room:
                del ids[room + 1 :]
                break
        ids.append(self.sep)
        return ids

    def _pieces(self, word: str) -> tuple[int, ...]:
        """Greedy longest-match-first split of one word; [UNK] for the whole word if any part has no piece."""
        if len(word) > MAX_WORD_CHARS:
            return (self.unk,)
        vocab = self.vocab
        whole = vocab.get(word)
        if whole is not None:
            return (whole,)
        out = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    out.append(found)
                    break
                end -= 1
            else:
                return (self.unk,)
            start = end
        return tuple(out)
