"""Concepts of a question without a model: the runs of words between stopwords and punctuation.

"When was Angela Merkel head of government of Germany?" gives
"Angela Merkel", "head", "government", "Germany": function words and
punctuation end a run, and so does a change from a capitalised word to a
lower-case one or back (a name next to a common noun; the first word of a
sentence does not count), so what remains are names and noun-phrase-like
terms, the parts a retriever should look for. Identifiers stay whole and
stand alone (``__slots__``, ``os.path.join``, ``7.3.2``), everything keeps
its original case, and a run is at most ``MAX_WORDS`` long (a long run
without function words is usually a list, not one term).

The question itself is always the first concept: the retriever searches
the whole question too, and with ``max_concepts = 0`` only it.
"""

from __future__ import annotations

from .lexical import IDENT, is_stopword
from ..variables import one_line

MAX_WORDS = 4
_SENTENCE_END = ".!?…。！？"  # noqa: RUF001  (CJK sentence ends: fullwidth ! and ?)


def _case(word: str) -> int:
    """1 for a capitalised word, -1 for a lower-case one, 0 for anything else (``__slots__``, ``7.3.2``)."""
    first = word[0]
    return 1 if first.isupper() else -1 if first.islower() else 0


def runs(text: str) -> list[str]:
    """The runs of non-stopwords of ``text``, in order, cut to ``MAX_WORDS`` words."""
    found: list[str] = []
    run: list[str] = []
    end = 0

    def flush() -> None:
        for i in range(0, len(run), MAX_WORDS):
            found.append(" ".join(run[i : i + MAX_WORDS]))
        run.clear()

    previous_case = 0
    for m in IDENT.finditer(text):
        gap = text[end : m.start()]
        starts_sentence = end == 0 or any(c in _SENTENCE_END for c in gap)
        end = m.end()
        if gap.strip():  # punctuation between two words ends the run
            flush()
        word = m.group()
        if is_stopword(word):
            flush()
            continue
        if not word.isalnum():  # an identifier is a concept of its own
            flush()
            found.append(word)
            continue
        # The first word of a sentence is capitalised whatever it is: it tells nothing.
        case = 0 if starts_sentence else _case(word)
        if run and previous_case * case < 0:  # a name meets a common word: two terms
            flush()
        if not run:
            previous_case = 0
        run.append(word)
        previous_case = case or previous_case
    flush()
    return found


def extract(question: str, limit: int) -> list[str]:
    """The question (on one line), then up to ``limit`` distinct concepts of it, in order of appearance."""
    first = one_line(question)
    seen = {first.casefold()}
    concepts = [first]
    if limit <= 0:
        return concepts
    for term in runs(question):
        key = term.casefold()
        if key not in seen:
            seen.add(key)
            concepts.append(term)
            if len(concepts) > limit:
                break
    return concepts
