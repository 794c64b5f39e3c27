"""The reference's inline markup read as plain text: what is stored and shown is what a person reads.

The Python reference (the default corpus) and many plain-text documents mark emphasis with stars
and literals with back-quotes (``*key*``, ``**PEP 448**``, double back-quotes, ``:ref:`x```).
``plain`` drops the emphasis and strong marks and keeps a literal or an interpreted role as its text
in quotes; an emphasised word that starts a sentence is quoted too (``*width* is ...`` becomes
``"width" is ...``), since without its marks the sentence would read as starting mid-way, in lower
case; half a mark a cut left at the text's end or start (``see **PEP``) is dropped. Document-load
stores each chunk so, after cutting and embedding it as written (the ids and vectors stay those of
the text as written), and the extractive answer shows each sentence so, also of stores made before.

Code keeps its stars: a mark opens only after a space or punctuation other than a star and before a
word character, and closes after a character that is not a space before one that is neither a word
character nor a star, within one paragraph (``f(*args, **kwargs)``, ``a * b``, ``"**"`` and
``"2**-1"`` stay as they are).
"""

from __future__ import annotations

import re

# the marked text: a word character first, no star, no blank line, and no space last
_SPAN = r"(\w(?:(?:[^*\n]|\n(?![ \t]*\n))*?[^\s*])?)"
_STRONG = re.compile(r"(?<![\w*])\*\*" + _SPAN + r"\*\*(?![\w*])")
_EMPHASIS = re.compile(r"(?<![\w*])\*" + _SPAN + r"\*(?![\w*])")
# an emphasised word where a sentence starts: the text's start, a line's, or after a sentence's end
_LEADING_EMPHASIS = re.compile(r"(^|\n[ \t]*|[.!?][\"')\]]*[ \t]+)\*" + _SPAN + r"\*(?![\w*])")
# a mark whose other half a cut left out (a chunk ending "see **PEP", one starting "448** - ..."): only
# words after it to the end, or before it from the start, so code's stars (``f(*args)``) are not taken
_CUT_OPENING = re.compile(r"(?<![\w*])\*{1,2}(?=\w[\w .,;-]*\Z)")
_CUT_CLOSING = re.compile(r"\A([\w .,;-]*\w)\*{1,2}(?![\w*])")
_LITERAL = re.compile(r"``([^`]+)``")
_ROLE = re.compile(r"(?<!\w):[a-z]+(?::[a-z]+)?:`([^`]+)`")


def plain(text: str) -> str:
    """``text`` with its inline markup read as plain text (see the module's docstring)."""
    if "*" not in text and "`" not in text:
        return text  # most text has none: no pattern need look at it
    text = _LEADING_EMPHASIS.sub(r'\1"\2"', text)
    text = _ROLE.sub(r'"\1"', text)
    text = _LITERAL.sub(r'"\1"', text)
    text = _STRONG.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\1", text)
    return _CUT_CLOSING.sub(r"\1", _CUT_OPENING.sub("", text))
