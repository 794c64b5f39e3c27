"""Words, sentences and BM25 for the extractive backend: plain Python, linear in the text.

Terms are case-folded (``Straße`` matches ``STRASSE``) and Unicode-aware
(``\\w``: letters and digits of any script). A text gives its words (runs of
letters and digits) plus, as separate terms, its identifiers kept whole
(``__slots__``, ``os.path.join``, ``7.3.2``, ``C++``, ``head_of_government_of``),
as the keyword index does: a question about ``__slots__`` then prefers a
sentence with ``__slots__`` over one that merely says "slots", while the
words still match across spellings. Stopwords never count.

Every cost here is linear in the input, so a pasted 100 kB "question" is as
safe as a short one.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from ..settings import ExtractiveSettings

_WORD = re.compile(r"[^\W_]+")
# Word characters joined by . : / @ - (and C++ or C#): an identifier, kept whole.
IDENT = re.compile(r"\w+(?:[.:/@\-]+\w+)*(?:\+\+|#)?")
# The end of a sentence: its punctuation, closing quotes or brackets, then white space.
_SENTENCE_END = re.compile(r"[.!?…。！？]+[\"'”’»)\]]*\s+")  # noqa: RUF001  (CJK ends, typographic quotes)
_PARAGRAPH = re.compile(r"\n\s*\n")

# Function words and question words in English: they say nothing about what a text is about.
_STOPWORDS = """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can cannot could did do does doing done down during each either
    else ever every few for from further get gets got had has have having he her here hers herself him
    himself his how however i if in into is it its itself just least less let like many may me
    might more most much must my myself neither no nor not now of off on once one only or other our
    ours ourselves out over own per please quite rather really same shall she should since so some
    such than that the their theirs them themselves then there these they this those though through
    thus to too under until up upon us use used using versus very via vs was we were what whatever when whence
    where whether which while who whom whose why will with within without would yet you your yours
    yourself yourselves s t d ll m re ve isn aren wasn weren doesn don didn won wouldn shouldn couldn
    tell explain describe show give know mean means meant way ways thing things kind
"""
STOPWORDS = frozenset(_STOPWORDS.split())


def is_stopword(word: str) -> bool:
    return word.casefold() in STOPWORDS


def terms(text: str) -> list[str]:
    """The searchable terms of ``text``: case-folded non-stopwords, then whole identifiers."""
    folded = text.casefold()
    words = [w for w in _WORD.findall(folded) if w not in STOPWORDS]
    idents = [m for m in IDENT.findall(folded) if not m.isalnum()]
    return words + idents


def stems(text: str) -> list[str]:
    """``terms`` with each word reduced to its English stem (Snowball: ``casefolding`` and
    ``casefold`` meet, ``globals`` and ``global``, ``called`` and ``calls``); identifiers stay
    whole (``__getattr__``, ``str.casefold``)."""
    stem = _stemmer()
    return [stem(term) if term.isalnum() else term for term in terms(text)]


_KNOWN_STEMS = 50_000  # words whose stems a thread remembers; past it, it starts again (a pasted megabyte)
_local = threading.local()  # a Snowball stemmer keeps the word it works on in itself: one per thread


def _stemmer() -> Callable[[str], str]:
    stem = getattr(_local, "stem", None)
    if stem is None:
        import snowballstemmer  # pure Python; the stemmer Sphinx's search uses

        stem_word = snowballstemmer.stemmer("english").stemWord
        known: dict[str, str] = {}

        def stem(word: str) -> str:
            found = known.get(word)
            if found is None:
                if len(known) >= _KNOWN_STEMS:
                    known.clear()
                found = known[word] = stem_word(word)
            return found

        _local.stem = stem
    return stem


# A title underlined (or over- and underlined) with one repeated punctuation character, as
# reStructuredText and Markdown setext write headings: structure, not a statement to quote.
_UNDERLINE = re.compile(r"^[ \t]*([=\-*~^#\"'`+_.:])\1{2,}[ \t]*$")


def _without_headings(text: str) -> str:
    lines = text.split("\n")
    keep = [True] * len(lines)
    for i, line in enumerate(lines):
        if _UNDERLINE.match(line):
            keep[i] = False
            if i > 0 and lines[i - 1].strip() and not _UNDERLINE.match(lines[i - 1]):
                keep[i - 1] = False  # the title it underlines
    # A removed title leaves a paragraph break, so the text around it does not run together.
    return "\n".join(line if k else "" for line, k in zip(lines, keep, strict=True))


def sentences(text: str) -> Iterator[str]:
    """The sentences of ``text``, in order, each on one line.

    Headings (a title underlined with ``===``, ``***``, ``---``...) are left
    out. Paragraphs (blank-line separated) always end a sentence; inside one,
    line breaks are wrapping and a sentence ends at ``.``, ``!``, ``?`` (and
    their CJK forms) followed by white space, unless the next word starts in
    lower case ("e.g. this", "approx. ten").
    """
    for paragraph in _PARAGRAPH.split(_without_headings(text)):
        start = 0
        for m in _SENTENCE_END.finditer(paragraph):
            following = paragraph[m.end() : m.end() + 1]
            if following.islower():
                continue
            sentence = " ".join(paragraph[start : m.end()].split())
            if sentence:
                yield sentence
            start = m.end()
        sentence = " ".join(paragraph[start:].split())
        if sentence:
            yield sentence


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, marked with "…"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


# bm25's keyword defaults are the extractive backend's settings' own, written once there.
_EXTRACTIVE = ExtractiveSettings()


def bm25(query: Sequence[str], passages: Sequence[Sequence[str]], *, k1: float = _EXTRACTIVE.k1,
         b: float = _EXTRACTIVE.b) -> list[float]:
    """The BM25 score of each passage (a list of terms) for the query terms (repeats count once).

    The passages are the whole collection: document frequencies are counted
    among them. One pass over each passage's terms, so the cost is the
    total length, however long the query.
    """
    wanted = set(query)
    if not passages or not wanted:
        return [0.0] * len(passages)
    counts = [Counter(t for t in p if t in wanted) for p in passages]
    df: Counter[str] = Counter()
    for c in counts:
        df.update(c.keys())
    n = len(passages)
    idf = {t: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
    avg_len = sum(len(p) for p in passages) / n or 1.0
    scores = []
    for passage, c in zip(passages, counts, strict=True):
        norm = k1 * (1.0 - b + b * len(passage) / avg_len)
        # sorted: the float sum is the same whatever order the Counter happens to hold
        scores.append(sum(idf[t] * tf * (k1 + 1.0) / (tf + norm) for t, tf in sorted(c.items())))
    return scores
