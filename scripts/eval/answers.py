"""What a person reads in an answer, measured line by line: does it hold the evidence, are its lines whole
sentences, does it say anything twice.

An answer's lines are the extractive backend's (one cited sentence or fact per line); the trailing
citations (``[doc#3]``, ``[fact: ...]``) are not part of what is judged.

- ``answered``: an evidence passage is in the answer when its words are there in order (case and
  spacing aside), or its gist is: at least ``GIST`` of its content words in one line.
- ``fragment``: a line that starts mid-sentence (a lower-case word that is not code, or a closing
  mark), carries the reference's inline markup (``*word*``, ``**``, double back-quotes, ``:role:``),
  or holds under ``MIN_WORDS`` words. A line that starts with code (``lambda_expr ::=``, ``if x:``) is not
  judged to start mid-sentence.
- ``duplicates``: pairs of lines whose term sets have a Jaccard similarity of at least ``NEAR``.
"""

from __future__ import annotations

import keyword
import re
from itertools import combinations

from processors.prompt.lexical import terms
from scripts.eval.evalset import content_words, normalise

GIST = 0.8
MIN_WORDS = 4
NEAR = 0.8

_CITATIONS = re.compile(r"(?:\s*\[[^\[\]]*\])+\s*$")
# emphasis (*word*), strong (**word**), a literal's double back-quotes, an interpreted role (:ref:`...`);
# not the stars of code (**kwargs, a * b)
_MARKUP = re.compile(r"``|(?<![\w*])\*\*?[^\s*](?:[^*]*?[^\s*])?\*\*?(?![\w*])|(?<!\w):[a-z]+:`")
_CODE = re.compile(r"[_().=\[\]<>:]")  # a first word with these is code (``lambda_expr ::=``), not prose
_CUT_NAME = re.compile(r"^[^\W_]\w*__(?!\w)")  # the tail of a cut dunder name: enter__() of __enter__()
_CLOSING = set(",;:.)]}”’»")  # noqa: RUF001  (typographic quotes)


def lines(answer: str) -> list[str]:
    """The answer's lines without their citations; empty lines dropped."""
    out = []
    for line in answer.splitlines():
        text = _CITATIONS.sub("", line).strip()
        if text:
            out.append(text)
    return out


def answered(evidence: str, answer: str) -> bool:
    wanted = normalise(evidence).casefold()
    shown = lines(answer)
    if wanted and wanted in normalise(" ".join(shown)).casefold():
        return True
    words = content_words(evidence)
    return bool(words) and any(len(words & content_words(line)) >= GIST * len(words) for line in shown)


def fragment(line: str) -> str | None:
    """Why ``line`` is not a whole sentence, or None when it is one."""
    words = line.split()
    if len(words) < MIN_WORDS:
        return "short"
    if _MARKUP.search(line):
        return "markup"
    first = words[0]
    if first[0] in _CLOSING or _CUT_NAME.match(first):
        return "starts mid-sentence"
    code = _CODE.search(first) or (first in keyword.kwlist and len(words) > 1 and _CODE.search(words[1]))
    if first[0].islower() and not code:
        return "starts mid-sentence"
    return None


def duplicates(answer_lines: list[str]) -> list[tuple[str, str]]:
    """The pairs of lines that say nearly the same thing."""
    sets = [set(terms(line)) for line in answer_lines]
    return [(answer_lines[i], answer_lines[j]) for i, j in combinations(range(len(sets)), 2)
            if sets[i] | sets[j] and len(sets[i] & sets[j]) >= NEAR * len(sets[i] | sets[j])]
