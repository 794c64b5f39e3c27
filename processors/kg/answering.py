"""Which of the facts about what a question names answer it, best first: the graph path of an answer.

A question that names an entity does not always ask about it: "How does Python resolve a name
inside a nested function?" names Python and asks nothing the graph holds. A fact is served
when the question asks for its relation:

- a phrase of the relation is in the question: its name ("capital_of": capital) or one of its
  ontology ``asked_by`` phrases ("prime minister", "born"), compared word by word on crude stems
  (born, birthplace; designed, design), every word of a phrase present;
- or the question asks "which/what <class>" and the fact's other end is of that class (or a
  subclass): "Which organization looks after Python?" asks for an Organization;
- or the question asks about the entity itself and nothing else ("Who is Angela Merkel?",
  "Tell me about Python 3.11"): then every fact about it answers.

Served facts are ranked by how well they match: a relation phrase (2), the asked class (1), the
other end named in the question too (1); ties keep the store's order. Written here, not taken
from a library: it is a few rules over our own ontology, and it must stay deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ragbus.schema import Fact

from .ontology import Ontology

_WORD = re.compile(r"[\w.]+", re.UNICODE)
_FILLER = frozenset({
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "by", "is", "was", "are", "were", "be", "been",
    "who", "what", "which", "when", "where", "whom", "whose", "how", "did", "does", "do", "tell", "me",
    "about", "please", "s",
})
_ABOUT_ITSELF = frozenset({"who", "what", "tell"})  # "who is X", "what is X", "tell me about X"
_WHICH = frozenset({"which", "what"})


def stem(word: str) -> str:
    """A crude stem, enough to meet a relation's phrases: born/birth stay, designed/designs/design meet."""
    w = word.lower().strip(".")
    for suffix in ("ing", "ed", "es", "s", "e"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def words(text: str) -> list[str]:
    return [stem(w) for w in _WORD.findall(text.replace("'s", " s").replace("_", " "))]


def _phrases(relation: str, ontology: Ontology | None) -> list[tuple[str, ...]]:
    found = [tuple(w for w in words(relation) if w not in _FILLER)]
    spec = ontology.relations.get(relation) if ontology is not None else None
    found += [tuple(words(p)) for p in (spec.asked_by if spec is not None else ())]
    return [p for p in found if p]


def _asked_classes(asked: list[str], ontology: Ontology | None) -> set[str]:
    """Classes named right after "which" or "what" ("which country", "what city")."""
    if ontology is None:
        return set()
    by_stem = {stem(c): c for c in ontology.classes}
    return {by_stem[asked[i + 1]] for i, w in enumerate(asked[:-1]) if w in _WHICH and asked[i + 1] in by_stem}


def about_itself(question: str, names: Iterable[str]) -> bool:
    """Whether the question is "who/what is <entity>" or "tell me about <entity>", and nothing more."""
    asked = words(question)
    if not asked or asked[0] not in _ABOUT_ITSELF:
        return False
    named = {w for name in names for w in words(name)}
    return all(w in named or w in _FILLER for w in asked)


def facts_that_answer(question: str, facts: Sequence[Fact], *, linked: Sequence[str], linked_names: Sequence[str],
              types: dict[str, str | None], ontology: Ontology | None, limit: int) -> list[Fact]:
    """The facts that answer ``question``, best first, at most ``limit``.

    ``linked``: the ids of the entities the question names, ``linked_names`` their names and aliases;
    ``types``: every entity's class by id (the facts' other ends included)."""
    if about_itself(question, linked_names):
        return list(facts[:limit])
    asked = words(question)
    present = set(asked)
    classes = _asked_classes(asked, ontology)
    phrases: dict[str, list[tuple[str, ...]]] = {}
    scored: list[tuple[int, int, Fact]] = []
    for order, fact in enumerate(facts):
        if fact.relation not in phrases:
            phrases[fact.relation] = _phrases(fact.relation, ontology)
        score = 2 * any(set(p) <= present for p in phrases[fact.relation])
        others = [e for e in (fact.head, fact.tail) if e not in linked]
        kind = types.get(others[0]) if others else None
        if kind is not None and ontology is not None and any(ontology.is_a(kind, c) for c in classes):
            score += 1
        if not score:
            continue
        if not others:  # both ends named: "Was Guido van Rossum the BDFL of Python?"
            score += 1
        scored.append((-score, order, fact))
    return [fact for *_, fact in sorted(scored)[:limit]]
