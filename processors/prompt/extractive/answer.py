"""The extractive answer to ``document-prompt``: the given sentences most relevant to the question, cited.

Its pipeline, step by step, is docs/extractive-answer.md: passages made whole, scored by BM25 over
stems, the entry that defines what is asked first, the sentences that answer before the rest, each
once, cited.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable
from dataclasses import dataclass

from ragbus.ingestion.markup import plain

from .answering import Asked
from .asked import asked_names, asked_subject, defined_subject
from .lexical import bm25, sentences, shorten, stems, terms
from ..settings import ExtractiveSettings
from .tables import rows
from ..variables import PromptInput, one_line
from .whole import HEADING_WORDS, cut_at_end, cut_at_start, defined_name, is_heading, joined, mended

NOTHING_FOUND = "No relevant information was found for: "
MAX_ECHO_CHARS = 300  # of the question, in the nothing-found answer
NEAR = 0.8  # Jaccard of two sentences' term sets at or above which they say the same thing
_REFERRING = frozenset({"It", "This", "These", "They", "Its", "Their", "Such"})
# Of those, the words that cannot stand for anything but what came before ("It" is as often "it is
# said that ..."): a sentence that starts with one and whose sentence before was not given dangles.
_DANGLING = _REFERRING - {"It"}


def refers_back(sentence: str) -> bool:
    """Whether ``sentence`` starts with a word that stands for what the sentence before it names."""
    first = sentence.split(maxsplit=1)[0] if sentence.strip() else ""
    return first in _REFERRING


@dataclass(frozen=True, slots=True)
class Passage:
    text: str
    citation: str
    is_fact: bool
    rank: int = 0  # of its document, in the order given (retrieval's)
    also: tuple[str, ...] = ()  # the citations of the other documents with the same sentence
    defines: tuple[str, ...] = ()  # the names the signatures heading it define (``whole.defined_name``)
    head: str = ""  # with sentences that refer back joined to it: the first sentence alone


def cited(p: Passage) -> list[str]:
    return [p.citation, *p.also]


def passages(inp: PromptInput, refer_back_chars: int = 0, entry_chars: int = 0) -> list[Passage]:
    """Document sentences, then facts, in the order given, each text once (a sentence with every
    document it is in); a sentence that refers back joined to the one before it while the two hold
    at most ``refer_back_chars`` characters, and the sentences after an entry's first (the one a
    heading heads) joined to it, up to the next heading, while it holds at most ``entry_chars`` (0: never)."""
    made = _Passages(refer_back_chars, entry_chars)
    for rank, (document, citation) in enumerate(zip(inp.documents, inp.citations, strict=True)):
        found = mended(list(sentences(rows(document))))
        reading = _Reading(citation, rank, alone=len(found) == 1)
        for n, sentence in enumerate(found):
            made.sentence(reading, sentence, first=n == 0, final=n == len(found) - 1)
    out, seen = made.out, set()
    for fact in inp.facts:
        text = one_line(fact)
        key = "fact\0" + text.casefold()
        if text and key not in seen:
            seen.add(key)
            out.append(Passage(text, f"[fact: {text}]", True))
    return out


@dataclass(slots=True)
class _Reading:
    """Where the reading of one document's sentences stands, in order."""

    citation: str
    rank: int
    alone: bool  # the document is one sentence: what it is, nothing whole to prefer and no heading
    heading: str = ""  # headings not yet joined to the sentence they head
    names: list[str] = dataclasses.field(default_factory=list)  # the names those headings define
    last: int | None = None  # the passage of this document's sentence before
    own: bool = False  # whether this document made it (not merged into another document's)
    said: bool = False  # whether the sentence before is in a passage (not cut, not too short)
    entry: bool = False  # whether out[last] is an entry (a heading's) of this document, open to the sentences after


class _Passages:
    """The passages of the documents read so far, each text once (``where``: a sentence's key -> its passage)."""

    def __init__(self, refer_back_chars: int, entry_chars: int) -> None:
        self.refer_back_chars, self.entry_chars = refer_back_chars, entry_chars
        self.out: list[Passage] = []
        self.where: dict[str, int] = {}

    def sentence(self, at: _Reading, sentence: str, *, first: bool, final: bool) -> None:
        cut = (first and cut_at_start(sentence)) or (final and cut_at_end(sentence))
        if self.refer_back_chars > 0 and not at.said and not at.heading and sentence.split(maxsplit=1)[0] in _DANGLING:
            cut = True  # "This is called object resurrection.": what it names is in the sentence not given
        at.said = False
        if cut and not at.alone:
            return
        sentence = plain(sentence)
        if not at.alone and is_heading(sentence):
            at.entry = False  # the next entry begins
            at.heading = f"{at.heading} {sentence}".strip()
            if name := defined_name(sentence):
                at.names.append(name)
            return
        defines: tuple[str, ...] = ()
        headed = bool(at.heading)
        if at.heading:
            sentence, at.heading, defines, at.names = joined(at.heading, sentence), "", tuple(at.names), []
        if len(sentence.split()) < HEADING_WORDS:  # alone, a line this short says nothing whole
            at.last = None
            return
        at.said = True  # in a passage of its own, joined to the one before, or merged into another's
        if self._entry_goes_on(at, sentence):
            return
        at.entry = False
        if at.last is not None and self.refer_back_chars > 0 and refers_back(sentence):
            if not at.own and f" {sentence}" in self.out[at.last].text:
                return  # another document said the two, joined: this one's citation is there already
            if at.own and len(self.out[at.last].text) + 1 + len(sentence) <= self.refer_back_chars:
                # "It means that ..." says what the sentence before it is about: one passage, shown
                # as one line; the sentence before stays found by its own text (a document holding
                # it too adds its citation here)
                self._join(at.last, sentence)
                self.where.setdefault(self.out[at.last].text.casefold(), at.last)
                return  # the next may refer back too
            if sentence.split(maxsplit=1)[0] in _DANGLING:
                return  # it cannot be said with what it names, and alone it dangles
        key = sentence.casefold()
        at.own = key not in self.where
        if at.own:
            self.where[key] = at.last = len(self.out)
            self.out.append(Passage(sentence, at.citation, False, at.rank, defines=defines))
            at.entry = headed and self.entry_chars > 0
        else:
            at.last = self.where[key]
            if at.citation not in cited(given := self.out[at.last]):
                self.out[at.last] = dataclasses.replace(given, also=(*given.also, at.citation))

    def _entry_goes_on(self, at: _Reading, sentence: str) -> bool:
        """The sentence joined to the entry open before it, if it fits and was not said alone already (then
        the entry ends before it, and that line cites this document too)."""
        if not at.entry or at.last is None or len(self.out[at.last].text) + 1 + len(sentence) > self.entry_chars:
            return False
        alone = self.where.get(sentence.casefold())  # a line that says this sentence alone, given before
        if alone is not None and self.out[alone].text.casefold() == sentence.casefold():
            return False
        # "d[key] — Return the item of d with key key." and "Raises a KeyError if key is not in the map.":
        # an entry says what its name does in its first sentences, one line; each sentence stays found by
        # its own text (a document holding it too adds its citation)
        self._join(at.last, sentence)
        self.where.setdefault(sentence.casefold(), at.last)
        return True

    def _join(self, at: int, sentence: str) -> None:
        before = self.out[at]
        self.out[at] = dataclasses.replace(before, text=f"{before.text} {sentence}", head=before.head or before.text)


def best(scores: list[float], indexes: list[int], limit: int, min_score: float,
         lead: frozenset[int] = frozenset()) -> list[int]:
    """Up to ``limit`` of ``indexes`` scoring above ``min_score``, those of ``lead`` first, then best
    first, earlier first on a tie."""
    relevant = [i for i in indexes if scores[i] > min_score]
    return heapq.nsmallest(limit, relevant, key=lambda i: (i not in lead, -scores[i], i))


def similarity(a: list[set[str]], b: list[set[str]]) -> float:
    """Jaccard of two passages' term sets, the closest of their texts and first sentences."""
    return max((len(x & y) / len(x | y) for x in a for y in b if x | y), default=0.0)


def best_once(found: list[Passage], scores: list[float], indexes: list[int], limit: int,
              min_score: float, lead: frozenset[int] = frozenset(),
              diversity: float = 0.0) -> list[tuple[int, list[str]]]:
    """``best``, each pick balanced against what is already said (maximal marginal relevance: a
    passage's score, as a share of the best one's, less ``diversity`` times its similarity to the
    closest passage taken; 0 = by score alone), with a sentence nearly the same as one taken merged
    into it: each taken passage with the citations of every document it is in, in the order met."""
    ranked = best(scores, indexes, len(indexes), min_score, lead)
    order = {i: n for n, i in enumerate(ranked)}
    top = max((scores[i] for i in ranked), default=0.0) or 1.0
    terms_of = {i: [set(terms(text)) for text in (found[i].text, found[i].head) if text] for i in ranked}
    taken: list[int] = []
    closest = dict.fromkeys(ranked, 0.0)  # each candidate's similarity to the closest passage taken
    pool = list(ranked)
    while pool and len(taken) < limit:
        pick = min(pool, key=lambda i: (i not in lead, diversity * closest[i] - scores[i] / top, order[i]))
        taken.append(pick)
        pool = [i for i in pool if i != pick]
        for i in pool:
            closest[i] = max(closest[i], similarity(terms_of[i], terms_of[pick]))
        pool = [i for i in pool if closest[i] < NEAR]  # nearly the same as one taken: merged below
    cites = {i: cited(found[i]) for i in taken}
    for i in ranked:
        if i in cites:
            continue
        same = next((t for t in taken if similarity(terms_of[i], terms_of[t]) >= NEAR), None)
        if same is not None:
            cites[same].extend(c for c in cited(found[i]) if c not in cites[same])
    return [(i, cites[i]) for i in taken]


# How an evaluation re-weighs the passages' scores (``scripts/eval_sentence_meaning.py`` adds a
# sentence model's): the passages, their scores as computed here, the question -> the scores to use.
Reweigh = Callable[[list[Passage], list[float], str], list[float]]


def compose(inp: PromptInput, settings: ExtractiveSettings, reweigh: Reweigh | None = None) -> str:
    return "\n".join(compose_lines(inp, settings, reweigh))


def choose(inp: PromptInput, settings: ExtractiveSettings, max_sentences: int,
           reweigh: Reweigh | None = None,
           answering: bool = False) -> tuple[list[Passage], list[tuple[int, list[str]]], list[int]]:
    """The passages of ``inp``, the best ``max_sentences`` sentences of them with every citation each
    has, and the best ``max_facts`` facts: what an answer (or a model's prompt) is made of. With
    ``answering``, of those sentences only the ones that answer the question (``answering.py``)."""
    found = passages(inp, settings.max_sentence_chars if settings.refer_back else 0,
                     settings.max_sentence_chars if settings.entries else 0)
    words = stems if settings.stems else terms
    scores = bm25(words(inp.query), [words(p.text) for p in found], k1=settings.k1, b=settings.b)
    scores = [
        s if p.is_fact else s * (1 + settings.rank_weight / (1 + p.rank)) for s, p in zip(scores, found, strict=True)
    ]
    if reweigh is not None:
        scores = reweigh(found, scores, inp.query)
    sentence_ids = [i for i, p in enumerate(found) if not p.is_fact]
    fact_ids = [i for i, p in enumerate(found) if p.is_fact]
    asked = asked_names(inp.query) if settings.definitions_first else frozenset()
    subject = asked_subject(inp.query) if settings.definitions_first else frozenset()
    lead = frozenset(i for i in sentence_ids if asked.intersection(found[i].defines)
                     or (subject and defined_subject(found[i].head or found[i].text) == subject))
    picked_sentences = best_once(found, scores, sentence_ids, max_sentences, settings.min_score, lead,
                                 settings.diversity)
    if answering:  # never down to nothing: evidence found says its best line, rather than "nothing found"
        question = Asked.of(inp.query, settings.name_words, words)
        picked_sentences = [(i, c) for i, c in picked_sentences
                            if question.answers(found[i].text, i in lead)] or picked_sentences[:1]
    picked_facts = best(scores, fact_ids, settings.max_facts, settings.min_score) if settings.max_facts else []
    return found, picked_sentences, picked_facts


def compose_lines(inp: PromptInput, settings: ExtractiveSettings, reweigh: Reweigh | None = None) -> list[str]:
    """The answer's lines: each cited sentence, then the header and each cited fact (the pieces of a stream)."""
    found, picked_sentences, picked_facts = choose(inp, settings, settings.max_sentences, reweigh,
                                                   answering=settings.answering)
    if not picked_sentences and not picked_facts:
        return [NOTHING_FOUND + shorten(one_line(inp.query), MAX_ECHO_CHARS)]
    lines = [f"{shorten(found[i].text, settings.max_sentence_chars)} {' '.join(cited)}"
             for i, cited in picked_sentences]
    if picked_facts:
        if inp.header:
            lines.append(inp.header)
        lines.extend(found[i].citation for i in picked_facts)
    return lines


def narrowed(inp: PromptInput, settings: ExtractiveSettings, max_sentences: int) -> PromptInput:
    """``inp`` with only what an answer could be made of, for a model to write it: the best
    ``max_sentences`` whole sentences of its documents, most relevant first, each once with every
    document it is in as its citation (``[doc#3] [doc#7]``), and the facts that match the question
    (the best ``max_facts``). The same choice the extractive answer makes, with more sentences."""
    found, picked_sentences, picked_facts = choose(inp, settings, max_sentences)
    return dataclasses.replace(
        inp,
        documents=tuple(shorten(found[i].text, settings.max_sentence_chars) for i, _ in picked_sentences),
        citations=tuple(" ".join(cited) for _, cited in picked_sentences),
        facts=tuple(found[i].text for i in picked_facts),
    )
