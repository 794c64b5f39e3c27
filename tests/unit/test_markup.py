"""The reference's inline markup read as plain text, and code's stars left alone."""

from __future__ import annotations

import pytest

from ragbus.ingestion.markup import plain


@pytest.mark.parametrize(("marked", "read"), [
    ("The value *n* is an integer.", "The value n is an integer."),
    ("See ``__index__`` and **PEP 357**.", 'See "__index__" and PEP 357.'),
    ("Use :ref:`the data model` here.", 'Use "the data model" here.'),
    ("*width* is a decimal integer.", '"width" is a decimal integer.'),  # a sentence it starts stays one
    ("It ends. *width* is one.\n   *fill* is another.", 'It ends. "width" is one.\n   "fill" is another.'),
    ("an *asynchronous\n   iterator* is one", "an asynchronous\n   iterator is one"),  # wrapped inside a paragraph
    ("Unpacking, see **PEP", "Unpacking, see PEP"),  # half a mark, the other half cut off
    ("448** - Additional Unpacking Generalizations", "448 - Additional Unpacking Generalizations"),
])
def test_marks_are_dropped_and_literals_quoted(marked, read):
    assert plain(marked) == read


@pytest.mark.parametrize("code", [
    "def f(*args, **kwargs): pass",
    "x = a * b * c",
    'The power operator "**" binds less tightly, that is, "2**-1" is "0.5".',
    "* a bullet\n* another bullet",
    "a *half mark\n\nand a paragraph* later",  # never across a blank line
    "def f(*args): return g(**kwargs)",
    "print(*items, sep=sep)",
])
def test_code_and_lone_stars_are_left_as_they_are(code):
    assert plain(code) == code
