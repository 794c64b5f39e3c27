"""What a question asks for, beyond its words: the names it asks about, and the thing it asks to have
defined.

The extractive answer scores sentences by the question's words (``lexical``); these say which
sentences are the reference's own answer to it, so they can lead (``answer.choose``):

- ``asked_names``: the identifiers of the question (``__getattr__``, ``casefold`` of
  ``str.casefold``), which the reference's entries define (``whole.defined_name``);
- ``asked_subject`` and ``defined_subject``: "What is a future statement?" asks to have "future
  statement" defined, and "A future statement is a directive to the compiler ..." defines it: the
  reference's definitions start with their subject, then "is" or "are"; a sentence that only uses
  the words ("Note that there is nothing special about the statement") does not.
"""

from __future__ import annotations

import re

from .lexical import IDENT, stems

# "What is a future statement?", "What are generator expressions?", "What does 'nonlocal' mean?",
# "What is meant by a keyword argument?", "Define a coroutine."
_ASKS_DEFINITION = re.compile(
    r"^\s*(?:what\s+(?:is|are)\s+(?:meant\s+by\s+)?|what\s+(?:does|do)\s+(?=.+\smean\W*$)|define\s+)"
    r"(?:an?\s+|the\s+)?(?P<subject>.+?)(?:\s+mean)?\s*[?.!]*\s*$",
    re.IGNORECASE,
)
# A sentence that defines its subject: at most six words, then "is" or "are" (and not "is not").
_DEFINES = re.compile(r"^(?:an?\s+|the\s+)?(?P<subject>(?:\S+\s+){0,5}?\S+)\s+(?:is|are)\s+(?!not\b)", re.IGNORECASE)
_MOST_SUBJECT_WORDS = 6


def asked_names(query: str) -> frozenset[str]:
    """The names of code the question asks about, as ``whole.defined_name`` gives a signature's
    (``__getattr__``, ``casefold`` of ``str.casefold``): its identifiers, not its plain words."""
    return frozenset(m.rsplit(".", 1)[-1] for m in IDENT.findall(query.casefold()) if not m.isalnum())


def _subject_stems(subject: str) -> frozenset[str]:
    """The word stems of a subject (an identifier counts by its words: ``__future__`` is "future")."""
    return frozenset(term for term in stems(subject) if term.isalnum())


def asked_subject(query: str) -> frozenset[str]:
    """The stems of what the question asks to have defined ("What is a future statement?": futur,
    statement); empty when it asks something else."""
    m = _ASKS_DEFINITION.match(query)
    if not m or len(m["subject"].split()) > _MOST_SUBJECT_WORDS:
        return frozenset()
    return _subject_stems(m["subject"])


def defined_subject(sentence: str) -> frozenset[str]:
    """The stems of what ``sentence`` defines when it is a definition ("A future statement is a
    directive ...": futur, statement); empty otherwise."""
    m = _DEFINES.match(sentence)
    return _subject_stems(m["subject"]) if m else frozenset()

