"""Sentences fit to show on their own: not cut by a chunk boundary, and without the reference's inline markup.

A chunk of a long document starts wherever the chunker cut it, most often inside a sentence
(``or a comma-separated list, the latter yielding a tuple) and assigns ...``), and may end inside
one. Such a piece says half of something, so the extractive answer does not use it: the whole
sentence is in the neighbouring chunk (the chunker's overlap), where it is a candidate like any other.

- ``cut_at_start``: a first sentence that starts with a lower-case word that is not code
  (``lambda_expr ::= ...`` and ``if x:`` lines start in lower case and are whole), with the tail
  of a name (``enter__()``), or with a mark that closes something (``, ) ; :``);
- ``cut_at_end``: a last sentence of prose that ends without any closing mark (code and
  signatures end without one and are kept: they hold code characters);
- ``is_heading``: a line of under four words that ends no sentence: a signature (``str.casefold()``),
  a grammar rule, a label (``See also:``). Alone it says nothing; the answer joins it to the sentence
  after it (``str.casefold() — Return a casefolded copy of the string.``);
- ``plain``: emphasis and strong marks (``*key*``, ``**PEP 3115**``) are dropped, a literal in
  double back-quotes or an interpreted role (:ref:`x`) is kept as its text in quotes.
"""

from __future__ import annotations

import keyword
import re

_CODE = re.compile(r"[_().=\[\]<>:{}/\\@#%&|~^]")
_KEYWORDS = frozenset(keyword.kwlist) | {"match", "case", "type"}
_CUT_NAME = re.compile(r"^[^\W_]\w*__(?!\w)")  # the tail of a dunder name: enter__() of __enter__()
_CLOSING = frozenset(",;:.)]}”’»")  # noqa: RUF001  (typographic quotes)
_ENDED = re.compile(r"[.!?:;…\"'”’)\]]$")  # noqa: RUF001
_STRONG = re.compile(r"(?<![\w*])\*\*([^\s*](?:[^*]*?[^\s*])?)\*\*(?![\w*])")
_EMPHASIS = re.compile(r"(?<![\w*])\*([^\s*](?:[^*]*?[^\s*])?)\*(?![\w*])")
_LITERAL = re.compile(r"``([^`]+)``")
_ROLE = re.compile(r"(?<!\w):[a-z]+(?::[a-z]+)?:`([^`]+)`")


def cut_at_start(sentence: str) -> bool:
    first = sentence.split(maxsplit=1)[0] if sentence.strip() else ""
    if not first:
        return False
    if first[0] in _CLOSING or _CUT_NAME.match(first):
        return True
    return first[0].islower() and not is_code(sentence)


def is_code(line: str) -> bool:
    """A line of code rather than prose: its first word is code (``lambda_expr``, ``f(x)``), or a keyword
    followed by code or another keyword (``if __debug__:``, ``class C:``, ``async def``); the reference
    quotes the code inside its prose (``with "@staticmethod" and``), so a quoted word is prose."""
    words = line.split()[:2]
    if not words:
        return False
    if _CODE.search(words[0]):
        return words[0][0] not in "\"'“"
    if words[0] not in _KEYWORDS or len(words) < 2 or words[1][0] in "\"'“":
        return False
    return bool(_CODE.search(words[1])) or words[1] in _KEYWORDS


def cut_at_end(sentence: str) -> bool:
    text = sentence.rstrip()
    return bool(text) and not _ENDED.search(text) and not _CODE.search(text) and text[-1].isalpha()


_SENTENCE_ENDED = re.compile(r"[.!?…][\"'”’)\]]*$")  # noqa: RUF001
HEADING_WORDS = 4  # a line of fewer words that ends no sentence heads what follows it


def is_heading(sentence: str) -> bool:
    return len(sentence.split()) < HEADING_WORDS and not _SENTENCE_ENDED.search(sentence.rstrip())


def joined(heading: str, sentence: str) -> str:
    """A heading and the sentence it heads, as one line: a label runs on, anything else is set off."""
    return f"{heading} {sentence}" if heading.endswith(":") else f"{heading} — {sentence}"


def plain(sentence: str) -> str:
    text = _ROLE.sub(r'"\1"', sentence)
    text = _LITERAL.sub(r'"\1"', text)
    text = _STRONG.sub(r"\1", text)
    return _EMPHASIS.sub(r"\1", text)
