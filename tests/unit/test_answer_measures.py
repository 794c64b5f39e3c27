"""The answer measures of ``scripts/eval/answers.py``: what counts as answered, a fragment, a repeat."""

from __future__ import annotations

import pytest

from scripts.eval import answers

ANSWER = """The with statement wraps a block of code in the methods of a context manager. [pydoc:with#0]
enter__()" method is called before the block runs. [pydoc:with#1]
The value *n* is an integer. [pydoc:sequences#2]
object.__enter__(self) [pydoc:with#3]
The with statement wraps a block of code in methods of a context manager. [pydoc:compound#4]
[fact: with statement part_of Python]"""


def test_lines_drop_citations_and_lines_that_are_only_citations():
    got = answers.lines(ANSWER)
    assert got[0] == "The with statement wraps a block of code in the methods of a context manager."
    assert len(got) == 5 and not any("[" in line and "]" in line and "pydoc" in line for line in got)


def test_evidence_is_answered_in_order_or_by_its_gist_in_one_line():
    assert answers.answered("wraps a block of   code in the methods", ANSWER)
    assert answers.answered("a context manager's methods wrap the code block of the with statement", ANSWER)
    assert not answers.answered("the else clause runs when the loop ends without break", ANSWER)
    # the words spread over two lines are no gist of one
    assert not answers.answered("integer context manager block enter wraps", ANSWER)


@pytest.mark.parametrize(("line", "why"), [
    ('enter__()" method is called before the block runs.', "starts mid-sentence"),
    ("of a declaration is not limited to the class where it is defined.", "starts mid-sentence"),
    (", and so the loop ends with it.", "starts mid-sentence"),
    ("The value *n* is an integer.", "markup"),
    ("**PEP 3115** - Metaclasses in Python 3000", "markup"),
    ("See ``__slots__`` for the details of it.", "markup"),
    ("object.__enter__(self)", "short"),
    ("The with statement wraps a block.", None),
    ("lambda_expr ::= \"lambda\" [parameter_list] \":\" expression", None),
    ("Call f(*args, **kw) to spread them out.", None),
    ("Use a * b for the product of the two.", None),
])
def test_fragments(line, why):
    assert answers.fragment(line) == why


def test_near_duplicates_are_paired_and_different_lines_are_not():
    got = answers.duplicates(answers.lines(ANSWER))
    assert got == [("The with statement wraps a block of code in the methods of a context manager.",
                    "The with statement wraps a block of code in methods of a context manager.")]
