"""The extractive answer to ``document-prompt``: the given sentences most relevant to the question, cited.

No model is involved, so the answer can only be what the documents and
facts already say; choosing and citing is the whole job:

- every document is split into sentences, every fact is one passage;
- passages are scored by BM25 against the question's terms (``lexical.py``),
  the passages of this one request being the collection; a document
  sentence's score is raised by its document's retrieval rank
  (``rank_weight``), so the best chunk's best sentence leads;
- the best ``max_sentences`` document sentences come first, most relevant
  first, each followed by its document's citation (``[doc#3]``, or ``[2]``
  by position); then the best ``max_facts`` facts, each as its citation
  ``[fact: ...]``, after the snapshot header line when ``at_time`` was given
  (no facts in the answer, no header);
- ties go to the passage given first, and a sentence repeated in several
  documents is cited once (where it came first): the same request always
  gets the same answer;
- with nothing relevant, the answer says so plainly.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .lexical import bm25, sentences, shorten, terms
from .settings import ExtractiveSettings
from .variables import PromptInput, one_line

NOTHING_FOUND = "No relevant information was found for: "
MAX_ECHO_CHARS = 300  # of the question, in the nothing-found answer


@dataclass(frozen=True, slots=True)
class Passage:
    text: str
    citation: str
    is_fact: bool
    rank: int = 0  # of its document, in the order given (retrieval's)


def passages(inp: PromptInput) -> list[Passage]:
    """Document sentences, then facts, in the order given, each text once."""
    out: list[Passage] = []
    seen: set[str] = set()
    for rank, (document, citation) in enumerate(zip(inp.documents, inp.citations, strict=True)):
        for sentence in sentences(document):
            key = sentence.casefold()
            if key not in seen:
                seen.add(key)
                out.append(Passage(sentence, citation, False, rank))
    for fact in inp.facts:
        text = one_line(fact)
        key = "fact\0" + text.casefold()
        if text and key not in seen:
            seen.add(key)
            out.append(Passage(text, f"[fact: {text}]", True))
    return out


def best(scores: list[float], indexes: list[int], limit: int, min_score: float) -> list[int]:
    """Up to ``limit`` of ``indexes`` scoring above ``min_score``, best first, earlier first on a tie."""
    relevant = [i for i in indexes if scores[i] > min_score]
    return heapq.nsmallest(limit, relevant, key=lambda i: (-scores[i], i))


def compose(inp: PromptInput, settings: ExtractiveSettings) -> str:
    return "\n".join(compose_lines(inp, settings))


def compose_lines(inp: PromptInput, settings: ExtractiveSettings) -> list[str]:
    """The answer's lines: each cited sentence, then the header and each cited fact (the pieces of a stream)."""
    found = passages(inp)
    scores = bm25(terms(inp.query), [terms(p.text) for p in found], k1=settings.k1, b=settings.b)
    scores = [
        s if p.is_fact else s * (1 + settings.rank_weight / (1 + p.rank)) for s, p in zip(scores, found, strict=True)
    ]
    sentence_ids = [i for i, p in enumerate(found) if not p.is_fact]
    fact_ids = [i for i, p in enumerate(found) if p.is_fact]
    picked_sentences = best(scores, sentence_ids, settings.max_sentences, settings.min_score)
    picked_facts = best(scores, fact_ids, settings.max_facts, settings.min_score) if settings.max_facts else []
    if not picked_sentences and not picked_facts:
        return [NOTHING_FOUND + shorten(one_line(inp.query), MAX_ECHO_CHARS)]
    lines = [f"{shorten(found[i].text, settings.max_sentence_chars)} {found[i].citation}" for i in picked_sentences]
    if picked_facts:
        if inp.header:
            lines.append(inp.header)
        lines.extend(found[i].citation for i in picked_facts)
    return lines
