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


def test_the_brackets_of_code_are_not_citations():
    answer = 'import __future__ [as name] [pydoc:import#10]\nreturn_stmt ::= "return" [expression_list] [2]\n' \
             "A fact follows it here. [fact: with statement part_of Python]"
    assert answers.lines(answer) == ["import __future__ [as name]", 'return_stmt ::= "return" [expression_list]',
                                     "A fact follows it here."]
    assert [answers.fragment(line) for line in answers.lines(answer)] == [None, None, None]


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
    ('The power operator "**" binds less tightly, that is, "2**-1" is "0.5".', None),
    # whole code: a keyword before a keyword, a clause header, an assignment, a grammar rule, a signature
    ("async def func(param1, param2): do_stuff() await some_coroutine()", None),
    ("except E as N: try: foo finally: del N", None),
    ("iter = (ITER) iter = type(iter).__aiter__(iter) running = True", None),
    ('integer ::= decinteger | bininteger | octinteger | hexinteger', None),
    ("classmethod fromkeys(iterable[, value]) — Create a new dictionary with keys from iterable.", None),
    ("alias [name [command]] — Create an alias called name that executes command.", None),
    # prose is still judged: a word before a footnote, a keyword before prose, the words before a colon
    ("returns [1] the value it was given by the caller.", "starts mid-sentence"),
    ("in the loop it was given: the next item of it.", "starts mid-sentence"),
    ("was translated to a statement of the form below.", "starts mid-sentence"),
    ("as if each comparison were reversed. This method modifies the sequence in place.", "starts mid-sentence"),
    ("is not None, the value is returned unchanged to the caller.", "starts mid-sentence"),
    # a grid table's residue, after a row was said as a sentence; a bar quoted in prose is not
    ('"len(s)" — length of s |; |.', "markup"),
    ('| — "\'n\'" — Number. This is the same as "\'g\'".', "markup"),
    ('An OR pattern is two or more patterns separated by vertical bars "|".', None),
])
def test_fragments(line, why):
    assert answers.fragment(line) == why


def test_near_duplicates_are_paired_and_different_lines_are_not():
    got = answers.duplicates(answers.lines(ANSWER))
    assert got == [("The with statement wraps a block of code in the methods of a context manager.",
                    "The with statement wraps a block of code in methods of a context manager.")]


def test_the_listing_shows_a_fragment_whole():
    from ragbus.schema import DocumentRagResponse
    from scripts.eval.evalset import Question
    from scripts.eval_answers import report

    line = "width is a decimal integer defining the minimum total field width, including any prefixes, " \
           "separators, and other formatting characters."
    q = Question(id="q1", kind="k", question="?", evidence=["nothing of it"], how_made="", split="dev")
    out = report([q], {"q1": []}, {"q1": DocumentRagResponse(answer=f"{line} [d#1]")}, ["dev"], show=True)
    assert out[-1] == f"q1 [dev] fragment (starts mid-sentence): {line!r}"


def test_a_lower_case_start_before_a_call_is_still_mid_sentence():
    # only a signature's kind before a call makes the line code; a cut sentence that names a call is not
    assert answers.fragment("returns len(x) items of the sequence it was given") == "starts mid-sentence"
    assert answers.fragment("classmethod fromkeys(iterable, value=None) makes a new dictionary") is None


def test_citations_made_up_and_failed_answers_are_counted():
    from ragbus.schema import ChunkMatch, DocumentRagResponse
    from scripts.eval.evalset import Question
    from scripts.eval_answers import report

    qs = [Question(id=f"q{n}", kind="k", question="?", evidence=["nothing of it"], how_made="", split="dev")
          for n in range(4)]
    given = [ChunkMatch(chunk_id="d#1", score=1.0, text="x")]
    got = {
        "q0": DocumentRagResponse(answer="The with statement wraps a block. [d#1]", chunks=given, cited=["d#1"]),
        "q1": DocumentRagResponse(answer="The with statement wraps a block [d#7].", chunks=given),  # made up
        "q2": DocumentRagResponse(answer="No relevant information was found for: ?", chunks=given),
        "q3": "EndpointError: HTTP 400: the prompt is longer than the context",
    }
    row = next(line for line in report(qs, {q.id: [] for q in qs}, got, ["dev"], show=False)
               if line.startswith("| dev"))
    citing, invented, failed = (cell.strip() for cell in row.strip("|").split("|")[-3:])
    # of the two that answer something (not "nothing found", not failed), one cites a chunk it was given
    assert (citing, invented, failed) == ("50% of 2", "1", "1")


def test_the_answer_steps_misses_are_counted_by_kind_and_by_how_far_the_words_are_the_evidences():
    from ragbus.schema import ChunkMatch, DocumentRagResponse
    from scripts.eval.evalset import Question
    from scripts.eval_answers import GROUPS, report

    evidence = "The sort method is stable."
    qs = [Question(id="same", kind="identifier", question="Is the sort method stable?", evidence=[evidence],
                   how_made="", split="dev"),
          Question(id="other", kind="paraphrase", question="Do ties keep their order?", evidence=[evidence],
                   how_made="", split="dev")]
    given = [ChunkMatch(chunk_id="d#1", score=1.0, text=evidence)]
    got = {"same": DocumentRagResponse(answer=f"{evidence} [d#1]", chunks=given),
           "other": DocumentRagResponse(answer="Lists are mutable. [d#1]", chunks=given)}
    lines = report(qs, {"same": ["d#1"], "other": ["d#1"]}, got, ["dev"], show=False)
    header = next(line for line in lines if line.startswith("| half | identifier"))
    row = [line for line in lines if line.startswith("| dev")][-1]
    cells = dict(zip(header.strip("|").split("|")[1:], row.strip("|").split("|")[1:], strict=True))
    cells = {k.strip(): v.strip() for k, v in cells.items()}
    assert list(cells) == list(GROUPS)
    assert (cells["identifier"], cells["paraphrase"], cells["multi-concept"]) == ("1 of 1", "0 of 1", "0 of 0")
    assert (cells["overlap 0"], cells["2/3 or more"]) == ("0 of 1", "1 of 1")


def test_unrelated_lines_are_found_by_question_and_text_and_unlabelled_ones_counted_apart(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"id": "q1", "line": "The with statement wraps a block.", "label": "answers"}\n'
                    '{"id": "q1", "line": "Sequences  support slicing.", "label": "unrelated"}\n', encoding="utf-8")
    labels = answers.load_labels(path)
    # reordered, cited otherwise, spaced otherwise: still the same lines
    said = answers.lines("Sequences support slicing. [c#2]\nThe with statement wraps a block. [w#0] [x#1]\nNew line.")
    assert answers.unrelated("q1", said, labels) == (["Sequences support slicing."], ["New line."])
    assert answers.unrelated("q2", said[:1], labels) == ([], ["Sequences support slicing."])  # another question's
    assert answers.load_labels(tmp_path / "none.jsonl") == {}
    path.write_text('{"id": "q1", "line": "A.", "label": "answers"}\n'
                    '{"id": "q1", "line": "A.", "label": "unrelated"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="both ways"):
        answers.load_labels(path)
