"""Sentences fit to show on their own: not cut by a chunk boundary, and without the reference's inline markup.

A chunk of a long document starts wherever document-load cut it, most often inside a sentence
(``or a comma-separated list, the latter yielding a tuple) and assigns ...``), and may end inside
one. Such a piece says half of something, so the extractive answer does not use it: the whole
sentence is in the neighbouring chunk (document-load's overlap), where it is a candidate like any other.

- ``cut_at_start``: a first sentence that starts with a lower-case word that is not code
  (``lambda_expr ::= ...``, ``if x:``, ``except E as N:``, ``iter = ...``, ``classmethod f(x)``
  lines start in lower case and are whole), with the tail of a name (``enter__()``), or with a mark
  that closes something (``, ) ; :``);
- ``mended``: a sentence a display interrupted (the reference sets code apart in a paragraph of its
  own: ``is to insert:`` / ``import pdb; pdb.set_trace()`` / ``at the location you want ...``) is
  made one again: an open sentence (one that ends no sentence) of prose takes the code after it (not
  a list item's number: ``proceeds as follows:`` / ``1.`` / ``The context expression ...``), and
  a paragraph that starts mid-sentence continues the open pieces before it; one with none open
  before it is not used;
- ``cut_at_end``: a last sentence of prose that ends without any closing mark (code and
  signatures end without one and are kept: they hold code characters);
- ``is_heading``: a line of under four words that ends no sentence, or a signature of any length:
  a signature (``str.casefold()``, ``static str.maketrans(x[, y[, z]])``), a grammar rule, a label
  (``See also:``). Alone it says nothing; the answer joins it to the sentence
  after it (``str.casefold() — Return a casefolded copy of the string.``);
- the reference's inline markup is read as plain text by ``processors/ingestion/markup.py``
  (``plain``), which document-load applies to what it stores.
"""

from __future__ import annotations

import keyword
import re

_CODE = re.compile(r"[_().=\[\]<>:{}/\\@#%&|~^]")
_KEYWORDS = frozenset(keyword.kwlist) | {"match", "case", "type"}
# keywords that are English words too: followed by another keyword, they are prose ("as if each
# comparison were reversed", "is not", "and not"); as code they head a clause, which has its colon
_ENGLISH = frozenset({"and", "as", "else", "for", "from", "if", "in", "is", "not", "or", "while", "with"})
_CUT_NAME = re.compile(r"^[^\W_]\w*__(?!\w)")  # the tail of a dunder name: enter__() of __enter__()
_CLOSING = frozenset(",;:.)]}”’»")  # noqa: RUF001  (typographic quotes)
_OPERATOR = re.compile(r"^(?:[-+*/%&|^@<>!:]?=|::=|\*\*=|//=|>>=|<<=)$")  # iter = ..., integer ::= ...
_SIGNATURE_ARGS = re.compile(r"^(?:[^\W\d]\w*(?:\.\w+)*\(|\[[^\W\d])")  # fromkeys(iterable, [name
# the kinds a reference's signature line starts with (classmethod fromkeys(iterable)); after another lower-case
# word a call is prose cut mid-sentence (``calls f(x) when ...``)
_KINDS = frozenset({"classmethod", "staticmethod", "static", "abstractmethod", "alias", "coroutine", "awaitable",
                    "class", "exception", "function", "method", "attribute"})
_CLAUSE = re.compile(r"^\S+(?: \S+){0,3}:(?:\s|$)")  # except E as N: a clause's few words, then its colon
_COMPOUND = frozenset({"if", "elif", "else", "for", "while", "try", "except", "finally", "with", "def", "class",
                       "async", "match", "case"})
_SIGNATURE = re.compile(r"^(?:[^\W\d]\w* )?[^\W\d][\w.]*(?:\(.*\)|\s\[.*\])$")  # [kind] name(args) or name [args]
_ENDED = re.compile(r"[.!?:;…\"'”’)\]]$")  # noqa: RUF001


def cut_at_start(sentence: str) -> bool:
    first = sentence.split(maxsplit=1)[0] if sentence.strip() else ""
    if not first:
        return False
    if first[0] in _CLOSING or _CUT_NAME.match(first) or first == "|":
        return True  # ("| value_pattern | group_pattern": the alternatives of a grammar rule whose head was cut)
    return first[0].islower() and not is_code(sentence)


def is_code(line: str) -> bool:
    """A line of code rather than prose: its first word is code (``lambda_expr``, ``f(x)``), a keyword
    followed by code, or by another keyword unless the first is an English word too (``if __debug__:``,
    ``class C:``, ``async def``; not ``as if``), a compound
    statement's header (``except E as N:``), an assignment or a grammar rule (``iter = ...``,
    ``integer ::= ...``), or a signature after its kind (``classmethod fromkeys(iterable)``,
    ``alias [name]``); the reference quotes the code inside its prose (``with "@staticmethod" and``),
    so a quoted word is prose."""
    words = line.split()[:2]
    if not words:
        return False
    if _CODE.search(words[0]):
        return words[0][0] not in "\"'“"
    if len(words) < 2 or words[1][0] in "\"'“":
        return False
    if words[0] in _COMPOUND and _CLAUSE.match(line):
        return True
    if _OPERATOR.match(words[1]) or (words[0] in _KINDS and _SIGNATURE_ARGS.match(words[1])):
        return True
    return words[0] in _KEYWORDS and (bool(_CODE.search(words[1]))
                                      or (words[1] in _KEYWORDS and words[0] not in _ENGLISH))


def cut_at_end(sentence: str) -> bool:
    text = sentence.rstrip()
    return bool(text) and not _ENDED.search(text) and not _CODE.search(text) and text[-1].isalpha()


# a list item's number alone ("1.", "2)", "(a)"): it starts the item after it, it continues nothing
_ENUMERATOR = re.compile(r"^\(?(?:\d+|[a-z])[.)]$")
_SENTENCE_ENDED = re.compile(r"[.!?…][\"'”’)\]]*$")  # noqa: RUF001
HEADING_WORDS = 4  # a line of fewer words that ends no sentence heads what follows it


def is_heading(sentence: str) -> bool:
    text = sentence.rstrip()
    if _SENTENCE_ENDED.search(text):
        return False
    return len(text.split()) < HEADING_WORDS or bool(_SIGNATURE.match(text))


def is_open(sentence: str) -> bool:
    """Whether ``sentence`` ends no sentence: a display, a label, or prose a display interrupts."""
    return not _SENTENCE_ENDED.search(sentence.rstrip())


def mended(found: list[str]) -> list[str]:
    """The sentences of one document, those a display interrupted made whole again (each still
    starting as it did: a first one cut by the chunk boundary stays cut)."""
    out: list[str] = []
    prose_open = False  # out[-1] is prose that ends no sentence, with nothing but code after it
    for sentence in found:
        if out and cut_at_start(sentence):
            start = len(out)
            while start > 0 and is_open(out[start - 1]):
                start -= 1
            if start < len(out):
                out[start:] = [" ".join([*out[start:], sentence])]
                prose_open = is_open(sentence)
                continue
            prose_open = False  # a continuation of nothing given: not used
            continue
        if out and prose_open and is_code(sentence) and not _ENUMERATOR.match(sentence):
            out[-1] = f"{out[-1]} {sentence}"
            continue
        out.append(sentence)
        prose_open = is_open(sentence) and not is_code(sentence)
    return out



_ATTRIBUTE = re.compile(r"^[^\W\d]\w*(?:\.\w+)+$")  # object.__match_args__, definition.__name__: an attribute's entry


def defined_name(heading: str) -> str:
    """The name a signature heading defines, case-folded and without its owner (``__getattr__`` for
    ``object.__getattr__(self, name)``, ``casefold`` for ``str.casefold()``, ``__match_args__`` for the
    attribute entry ``object.__match_args__``); "" for any other heading."""
    text = heading.strip()
    if _ATTRIBUTE.match(text):
        return text.rsplit(".", 1)[-1].casefold()
    m = _SIGNATURE.match(text)
    if not m:
        return ""
    words = heading.split("(", 1)[0].split("[", 1)[0].split()
    return words[-1].rsplit(".", 1)[-1].casefold() if words else ""


def joined(heading: str, sentence: str) -> str:
    """A heading and the sentence it heads, as one line: a label runs on, anything else is set off."""
    return f"{heading} {sentence}" if heading.endswith(":") else f"{heading} — {sentence}"
