"""A follow-up made into a standalone question from the conversation before it (template ``condense-question``).

The extractive backend (no model) does it by rule, deterministically:

- a follow-up *leans* on what came before when it has a pronoun or demonstrative (``it``, ``its``,
  ``they``, ``this``, ``one``...), opens with ``and`` / ``or`` / ``what about`` / ``how about``, or has
  fewer than ``MIN_OWN`` searchable words of its own; one that does not is its own standalone question;
- a follow-up that leans gets the *subject* of the latest user question before it, in parentheses:
  "Can it contain statements? (lambda expression)". The subject is that question's words without its
  question words, auxiliaries, articles and pronouns (what a search would not look for), names and
  identifiers as written. Each earlier user question is first made standalone the same way, so a
  chain of follow-ups keeps its subject.

Only the user's questions are read, not the answers: an answer holds many terms besides the subject,
and appending them would pull retrieval toward whatever the last answer happened to say. With a model
(the openai backend) the ``condense-question`` template is the prompt, and ``model_line`` takes the
rewritten question from what the model wrote.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .lexical import is_stopword

USER = "user:"
MIN_OWN = 2  # searchable words a follow-up needs to stand on its own (besides leaning words)
MAX_SUBJECT_WORDS = 8

_TOKEN = re.compile(r"[^\s?!,;()\[\]{}]+")
_TRIM = "\"'“”‘’.:"  # noqa: RUF001  (typographic quotes)
# Words that point back at what was said: the follow-up needs the conversation to be understood.
_ANAPHORA = """
    it its itself they them their theirs themselves this that these those he him his she her hers one ones
    such former latter same above
"""
ANAPHORA = frozenset(_ANAPHORA.split())
OPENERS = ("and ", "or ", "what about ", "how about ", "but ", "also ", "then ")
# Not the subject of a question: question words, auxiliaries, articles, pronouns.
_FRAME = """
    what which who whom whose when where why how is are was were be been being am do does did done doing can
    could may might must shall should will would a an the i you we me my your our us please tell explain
    describe show mean means and or but so also then about exactly really
"""
FRAME = frozenset(_FRAME.split()) | ANAPHORA


def _words(text: str) -> list[str]:
    return [w for w in (t.strip(_TRIM) for t in _TOKEN.findall(text)) if w]


def leans(question: str) -> bool:
    """Whether ``question`` needs the conversation before it to be understood."""
    words = _words(question)
    folded = [w.casefold() for w in words]
    if any(w in ANAPHORA for w in folded) or question.lstrip().casefold().startswith(OPENERS):
        return True
    own = [w for w, f in zip(words, folded, strict=True) if f not in FRAME and not is_stopword(w)]
    return len(own) < MIN_OWN


def subject(question: str) -> str:
    """What ``question`` asks about: its words but the question's frame, in their order, at most
    ``MAX_SUBJECT_WORDS``."""
    kept = [w for w in _words(question) if w.casefold() not in FRAME]
    return " ".join(kept[:MAX_SUBJECT_WORDS])


def standalone(question: str, history: Sequence[str]) -> str:
    """``question`` made standalone from ``history``, lines ``user: ...`` / ``assistant: ...`` oldest first."""
    before = ""
    for line in history:
        if line.casefold().startswith(USER):
            asked = line[len(USER):].strip()
            if asked:
                before = _condensed(asked, before)
    return _condensed(question.strip(), before)


def _condensed(question: str, before: str) -> str:
    if not before or not leans(question):
        return question
    about = subject(before)
    if not about or about.casefold() in question.casefold():
        return question
    return f"{question} ({about})"


def model_line(text: str, question: str) -> str:
    """The rewritten question a model wrote: its first line, without a label or quotes; the question
    itself when the model wrote nothing usable."""
    for line in text.splitlines():
        line = re.sub(r"^\s*(standalone question|question|rewritten question)\s*:\s*", "", line, flags=re.I)
        line = line.strip().strip("\"'“”").strip()
        if line:
            return line
    return question
