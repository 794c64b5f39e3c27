"""Whether a sentence picked for the extractive answer answers the question: what lets an answer stop
when its evidence does, instead of always saying ``max_sentences`` lines.

Why the padding got in: a sentence is a candidate as soon as it shares one word with the question
(``min_score`` 0), and the answer took the best ``max_sentences`` of them whatever they said. When the
reference says little about what was asked, the last places went to sentences that meet the question
only through a word it happens to share: a part of the asked name ("index" of ``__index__``: two lines
about slicing; "debug" of ``__debug__``: pdb's post-mortem debugging; "context" of
``__suppress_context__``: four lines about context managers), the verb the question asks about the
name ("implement", "return", "create", "method"), "operator" when the operator asked about is a symbol
that is no word at all (``@``, ``^``), "statement" when the statement asked about is a keyword that is
also a stopword ("the with statement": "A Python program can also explicitly raise an exception with
the "raise" statement."), or a sentence that only sends the reader elsewhere ("See PEP 570 for
details."). Their scores do not set them apart: a share of the best line's score, or of the question's
words, drops sentences that hold the evidence first (``docs/retrieval-quality.md``).

What the question names is what sets them apart. ``Asked.of(question)`` reads it once:

- the names of code it says (``__index__``, ``str.casefold``, ``with_traceback()``, ``divmod()``) and
  the keywords it names as such ("the with statement", "the else clause", "lambda expressions");
- the operators it shows as symbols of their own (``@``, ``^``, ``/``, ``//``, ``%``), which no word
  of it stands for.

``Asked.answers(sentence)`` then says whether a sentence answers:

- a cross-reference ("See PEP 570 for details.", "For more information on context managers, see
  ...", "... are described in more detail in section Calls.") does not: it says where an answer is;
- when the question names code, a keyword or an operator, a sentence that does not say any of those
  names does not when the words it shares with the question are all the names' own (``__index__`` and
  "index"), or when the question says at most ``name_words`` words besides what it names: it asks
  about the name ("What does __contains__ implement?", "What is the value of __debug__?", "What is the
  @ operator for?"), and another name's sentence is about something else. A question that says more
  is answered in words too: the reference names an operator in words as often as by its symbol
  ("floor division" for ``//``);
- the reference's own entry for an asked name, or the sentence that defines what the question asks
  to have defined (``answer.choose``'s ``lead``), answers without saying the name, unless it is a
  cross-reference or the question names an operator it does not show.

A question that names nothing, in words other than the reference's, gets no help here: its words
cannot tell a sentence that answers it from one that shares them by chance.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass

from .lexical import IDENT, STOPWORDS, terms

# Sentences that only send the reader elsewhere.
_CROSS_REFERENCE = re.compile(
    r"^(?:see (?!also\b)|for (?:more|further) (?:information|details)\b|further (?:explanation|details|information)\b"
    r"|additional details\b|more information\b)"
    r"|\b(?:described|explained|discussed|documented) in (?:more|greater|further) detail\b",
    re.IGNORECASE,
)
_JOINED = re.compile(r"[/:@\-]+")  # what joins two names in one identifier-like run of the question
_CALLED = re.compile(r"([^\W\d]\w*(?:\.\w+)*)\(\)")  # divmod(), str.split(), property()
_KEYWORDS = {k.casefold(): k for k in {*keyword.kwlist, *keyword.softkwlist} - {"_"}}
# "the with statement", "an else clause", "lambda expressions", "the in operator"
_NAMED_KEYWORD = re.compile(
    r"\b(" + "|".join(sorted(_KEYWORDS, key=len, reverse=True))
    + r")\s+(?:statement|clause|keyword|expression|loop|block|operator)s?\b",
    re.IGNORECASE,
)
_OPERATOR_CHARS = frozenset("+-*/%@&|^~<>=!:.")
# a token of operator characters alone, perhaps quoted, perhaps before the sentence's punctuation
_SYMBOL = re.compile(r"(?<!\S)[\"'“‘`]?([-+*/%@&|^~<>=!:]+)[\"'”’`]?[?.,;!]?(?!\S)")  # noqa: RUF001
_NO_SYMBOL = frozenset({"-", ":", "!"})  # a dash or punctuation, not an operator


def code_names(question: str) -> frozenset[str]:
    """The names of code the question says, case-folded: identifiers with an underscore or a dot
    (``__index__``, ``str.casefold``, ``with_traceback``) and names it calls (``divmod()``)."""
    folded = question.casefold()
    found = {name for m in IDENT.findall(folded) for name in _JOINED.split(m)  # __aiter__/__anext__: two names
             if ("_" in name or "." in name) and any(c.isalpha() for c in name)}
    return frozenset(found | set(_CALLED.findall(folded)))


def keyword_names(question: str) -> frozenset[str]:
    """The keywords the question names as such ("the with statement": ``with``)."""
    return frozenset(_KEYWORDS[k.casefold()] for k in _NAMED_KEYWORD.findall(question))


def symbols(question: str) -> frozenset[str]:
    """The operators the question shows as symbols of their own (``@``, ``//``)."""
    return frozenset(s for s in _SYMBOL.findall(question) if s not in _NO_SYMBOL)


def shows(text: str, symbol: str) -> bool:
    """Whether ``text`` shows ``symbol`` as itself, not as part of another operator (``/`` in ``//``)."""
    start = 0
    while (at := text.find(symbol, start)) >= 0:
        before = text[at - 1] if at else " "
        end = at + len(symbol)
        after = text[end] if end < len(text) else " "
        if before not in _OPERATOR_CHARS and after not in _OPERATOR_CHARS:
            return True
        start = at + 1
    return False


def _bare(name: str) -> str:
    return name.rsplit(".", 1)[-1]


@dataclass(frozen=True, slots=True)
class Asked:
    """What the question names, read once; ``answers`` judges each sentence by it."""

    code: frozenset[str]  # code names, case-folded (``__index__``, ``str.casefold``)
    keywords: frozenset[str]  # keywords named as such (``with``)
    operators: frozenset[str]  # operators shown as symbols (``@``)
    parts: frozenset[str]  # the words of the code names and keywords, as ``words`` gives them ("index")
    question: frozenset[str]  # the question's words, as ``words`` gives them
    only_the_name: bool  # the question says at most ``name_words`` words besides what it names
    words: Callable[[str], list[str]]  # ``lexical.stems`` or ``lexical.terms``, as the answer compares words

    @classmethod
    def of(cls, question: str, name_words: int, words: Callable[[str], list[str]]) -> Asked:
        code, named_keywords = code_names(question), keyword_names(question)
        parts: set[str] = set()
        for name in code:
            parts.update(words(name.replace(".", " ").replace("_", " ")))
        for name in named_keywords:
            parts.update(words(name))
        asked = frozenset(words(question))
        others = asked - parts - code
        return cls(code, named_keywords, symbols(question), frozenset(parts), asked, len(others) <= name_words, words)

    def says_a_name(self, text: str, sentence_words: set[str]) -> bool:
        """Whether the sentence says one of the asked names: a code name whole, by its last part
        (``casefold()`` for ``str.casefold``, ``x.__del__()`` for ``__del__``), that part as a word
        ("casefolding" for ``casefold``, not for a dunder); a keyword quoted as the reference quotes
        code ("with") or, when it is no stopword, as a word ("globals" for ``global``); an operator
        shown as itself (``shows``)."""
        if any(shows(text, s) for s in self.operators):
            return True
        if self.code:
            idents = {t for t in terms(text) if not t.isalnum()}
            ends = {_bare(t) for t in idents}
            for name in self.code:
                bare = _bare(name)
                if name in idents or bare in ends:
                    return True
                word = bare.strip("_")  # a dunder is said whole; "casefolding" says casefold
                if (word == bare and word.isalnum() and word not in STOPWORDS
                        and set(self.words(word)) <= sentence_words):
                    return True
        for name in self.keywords:
            if re.search(rf"[\"'“‘`]{name}[\"'”’`]", text):  # noqa: RUF001
                return True
            if name.casefold() not in STOPWORDS and set(self.words(name)) <= sentence_words:
                return True
        return False

    def answers(self, text: str, lead: bool = False) -> bool:
        """Whether the sentence ``text`` answers the question. A ``lead`` (the reference's entry for an
        asked name, or its definition of what the question asks to have defined) does, unless it is a
        cross-reference, or the question asks about an operator the lead does not show: the definition
        was found by the question's words, and an operator is no word ("What is the @ operator for?"
        asks to have "operator" defined, and 'The "%" operator is ...' defines one)."""
        if _CROSS_REFERENCE.search(text):
            return False
        if not (self.code or self.keywords or self.operators):
            return True
        sentence_words = set(self.words(text))
        if self.says_a_name(text, sentence_words) or (lead and not self.operators):
            return True
        shared = sentence_words & self.question
        return not (shared <= self.parts or self.only_the_name)
