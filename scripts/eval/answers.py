"""What a person reads in an answer, measured line by line: does it hold the evidence, are its lines whole
sentences, does it say anything twice.

An answer's lines are the extractive backend's (one cited sentence or fact per line); the trailing
citations (``[doc#3]``, ``[fact: ...]``) are not part of what is judged.

- ``answered``: an evidence passage is in the answer when its words are there in order (case and
  spacing aside), or its gist is: at least ``GIST`` of its content words in one line.
- ``fragment``: a line that starts mid-sentence (a lower-case word that is not code, or a closing
  mark), carries the reference's inline markup (``*word*``, ``**``, double back-quotes, ``:role:``)
  or what is left of a table's bars and borders, or holds under ``MIN_WORDS`` words. A line that
  starts with code is not judged to start mid-sentence: a first word with code characters
  (``lambda_expr ::=``, ``f(x)``), a keyword before code or another keyword (``if x:``, ``async def``;
  not an English word before one, ``as if``), a compound statement's header (``except E as N:``),
  an assignment or grammar rule (``iter = ...``, ``integer ::= ...``), or a signature after its kind
  (``classmethod fromkeys(iterable)``, ``alias [name]``).
- ``duplicates``: pairs of lines whose term sets have a Jaccard similarity of at least ``NEAR``.
- ``unrelated``: the lines a person labelled as not answering the question (``answer_lines_dev.jsonl``,
  ``answer_lines_test.jsonl``: one line of an answer a row, keyed by the question's id and the line's
  text without its citations, so a label survives the lines being reordered or cited otherwise). A line
  ``answers`` when it is about what the question asks about, in the sense it asks: what the thing is,
  does, when, how, a condition or exception of that, its grammar or an example of it, also when it
  answers another side of the thing than the one asked; it is ``unrelated`` when it is about something
  else, however near its words are the question's (another name sharing a word: slicing for
  ``__index__``, the ``del`` statement for ``__del__``, another pdb command; the topic in general:
  exceptions in general for a question about cleanup code), or only points elsewhere ("See PEP 570 for
  details."; a "See also:" entry unless the question asks which PEP). Both halves were labelled on the
  answers from before lines were left out (``answering = false``), the dev half before the rule was
  chosen, the test half after. A line with no label is counted apart (``unlabelled``), never guessed.
"""

from __future__ import annotations

import json
import keyword
import re
from itertools import combinations
from pathlib import Path

from ragbus.prompt.extractive.lexical import terms
from scripts.eval.evalset import bare, content_words

GIST = 0.8
MIN_WORDS = 4
NEAR = 0.8
ANSWERS, UNRELATED = "answers", "unrelated"  # the two labels of an answer line


def labels_path(split: str) -> Path:
    """Where the hand labels of ``split``'s answer lines are kept."""
    return Path(__file__).with_name(f"answer_lines_{split}.jsonl")

# a chunk id (``[pydoc:with#3]``), a position (``[2]``) or a fact; not the brackets of code
# (``import __future__ [as name]``, ``"return" [expression_list]``)
_CITATIONS = re.compile(r"(?:\s*\[(?:[^\[\]\s]*#\d+|\d+|fact: [^\[\]]*)\])+\s*$")
# emphasis (*word*), strong (**word**), a literal's double back-quotes, an interpreted role (:ref:`...`);
# not the stars of code (**kwargs, a * b, "**" and "2**-1": a mark opens before a word character)
_MARKUP = re.compile(r"``|(?<![\w*])\*\*?\w(?:[^*]*?[^\s*])?\*\*?(?![\w*])|(?<!\w):[a-z]+:`")
# what is left of a grid table's borders when its row is said as a sentence: a bar that opens or ends
# the line ("length of s |; |."), a border's "+---"
_TABLE = re.compile(r"^\|\s|\s\|[;.]?$|\+---")
_CODE = re.compile(r"[_().=\[\]<>:]")  # a first word with these is code (``lambda_expr ::=``), not prose
_CUT_NAME = re.compile(r"^[^\W_]\w*__(?!\w)")  # the tail of a cut dunder name: enter__() of __enter__()
_OPERATOR = re.compile(r"^(?:[-+*/%&|^@<>!:]?=|::=|\*\*=|//=|>>=|<<=)$")  # ``iter = ...``, ``integer ::= ...``
_SIGNATURE = re.compile(r"^(?:[^\W\d]\w*(?:\.\w+)*\(|\[[^\W\d])")  # ``fromkeys(iterable``, ``[name``
_HEADER = re.compile(r"^\S+(?: \S+){0,3}:(?:\s|$)")  # ``except E as N:``: a clause's words, then its colon
# the kinds a reference's signature line starts with (``classmethod fromkeys(iterable)``)
_KINDS = frozenset({"classmethod", "staticmethod", "static", "abstractmethod", "alias", "coroutine", "awaitable",
                    "class", "exception", "function", "method", "attribute"})
_COMPOUND = frozenset({"if", "elif", "else", "for", "while", "try", "except", "finally", "with", "def", "class",
                       "async", "match", "case"})
# keywords that are English words too: "as if each comparison ..." starts mid-sentence, "async def" is code
_ENGLISH = frozenset({"and", "as", "else", "for", "from", "if", "in", "is", "not", "or", "while", "with"})
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
    wanted = bare(evidence).casefold()  # the reference's words, markup or none
    shown = lines(answer)
    if wanted and wanted in bare(" ".join(shown)).casefold():
        return True
    words = content_words(evidence)
    return bool(words) and any(len(words & content_words(line)) >= GIST * len(words) for line in shown)


def fragment(line: str) -> str | None:
    """Why ``line`` is not a whole sentence, or None when it is one."""
    words = line.split()
    if len(words) < MIN_WORDS:
        return "short"
    if _MARKUP.search(line) or _TABLE.search(line):
        return "markup"
    first = words[0]
    if first[0] in _CLOSING or _CUT_NAME.match(first):
        return "starts mid-sentence"
    if first[0].islower() and not starts_with_code(line):
        return "starts mid-sentence"
    return None


def starts_with_code(line: str) -> bool:
    words = line.split()
    first, second = words[0], words[1] if len(words) > 1 else ""
    if _CODE.search(first):
        return True
    if first in keyword.kwlist and (_CODE.search(second) or (second in keyword.kwlist and first not in _ENGLISH)):
        return True
    if first in _COMPOUND and _HEADER.match(line):
        return True
    return bool(_OPERATOR.match(second) or (first in _KINDS and _SIGNATURE.match(second)))


def duplicates(answer_lines: list[str]) -> list[tuple[str, str]]:
    """The pairs of lines that say nearly the same thing."""
    sets = [set(terms(line)) for line in answer_lines]
    return [(answer_lines[i], answer_lines[j]) for i, j in combinations(range(len(sets)), 2)
            if sets[i] | sets[j] and len(sets[i] & sets[j]) >= NEAR * len(sets[i] | sets[j])]


def line_key(question_id: str, line: str) -> tuple[str, str]:
    """What a label is found by: the question and the line's text, spacing aside."""
    return question_id, " ".join(line.split())


def load_labels(path: Path) -> dict[tuple[str, str], str]:
    """The labels in ``path`` (JSON lines of ``id``, ``line``, ``label``); none when it does not exist."""
    if not path.is_file():
        return {}
    out: dict[tuple[str, str], str] = {}
    for n, row in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not row.strip():
            continue
        item = json.loads(row)
        if item["label"] not in (ANSWERS, UNRELATED):
            raise ValueError(f"{path}:{n}: label {item['label']!r} is neither {ANSWERS!r} nor {UNRELATED!r}")
        key = line_key(item["id"], item["line"])
        if out.setdefault(key, item["label"]) != item["label"]:
            raise ValueError(f"{path}:{n}: {key} is labelled both ways")
    return out


def unrelated(question_id: str, answer_lines: list[str],
              labels: dict[tuple[str, str], str]) -> tuple[list[str], list[str]]:
    """The lines of one answer labelled unrelated, and those with no label at all."""
    found = [(line, labels.get(line_key(question_id, line))) for line in answer_lines]
    return [line for line, label in found if label == UNRELATED], [line for line, label in found if label is None]
