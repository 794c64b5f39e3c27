"""The reference's grid tables as lines a person can read: one line per row, its cells in order.

A grid table (reStructuredText's, as the reference's text keeps it)::

    +----------------+----------------------+-------+
    | Operation      | Result               | Notes |
    +================+======================+=======+
    | "s[i:j:k]"     | slice of *s* from *i* | (3)   |
    |                | to *j* with step *k*  |       |
    +----------------+----------------------+-------+

collapsed into sentences runs every cell of every row into one line of bars and dashes, which
says nothing whole. ``rows`` writes each body row as a paragraph of its own, its first cell, a
dash, then the others: ``"s[i:j:k]" — slice of *s* from *i* to *j* with step *k*.`` A cell's
lines are joined; a cell of footnote marks only (``(3)(5)``) is left out, as is the header row
(above the ``=`` border: labels, not statements). The columns are where the border's ``+`` marks
are; a table a chunk boundary cut keeps the rows it holds whole (a row cut at the chunk's start,
its first cell empty, and lines before the first border, whose columns are not known for sure,
are dropped, and so is a line that only ends with a bar: the tail of a row cut mid-line). A row
line's cells are between its bars when it has one a column: the stored text reads inline markup as
plain, so a cell's text may end before its column does. Lines that are not a table's are left as
they are.
"""

from __future__ import annotations

import itertools
import re

_BORDER = re.compile(r"^\+(?:[-=]+\+)+$")
_NOTES = re.compile(r"^(?:\(\d+\))+$")
_ENDED = re.compile(r"[.!?:;…\"'”’)\]]$")  # noqa: RUF001  (typographic quotes)


def rows(text: str) -> str:
    """``text`` with each grid table's body rows as paragraphs of their own (see the module)."""
    if "+-" not in text:
        return text  # no border, no table: the common case costs one scan
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _is_table_line(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        start = i
        while i < len(lines) and _is_table_line(lines[i]):
            i += 1
        block = [line.strip() for line in lines[start:i]]
        if not any(_BORDER.match(line) for line in block):
            out.extend(lines[start:i])  # bars without a border: a grammar's alternatives, not a table
            continue
        out.append("")
        for row in _rows(block):
            out += [row, ""]
    return "\n".join(out)


def _is_table_line(line: str) -> bool:
    text = line.strip()
    # (a line that only ends with a bar is the tail of a row a chunk boundary cut mid-line)
    return bool(text) and (bool(_BORDER.match(text)) or text.startswith("|") or text.endswith("|"))


def _rows(block: list[str]) -> list[str]:
    """The body rows of one table block, each as one line."""
    out: list[str] = []
    columns: list[int] | None = None  # the positions of the current border's "+" marks
    row: list[str] = []  # the lines of the row being read
    for line in block:
        if _BORDER.match(line):
            header = "=" in line
            if columns is not None and row and not header:
                out.extend(_row(row, columns))
            row = []
            columns = [n for n, ch in enumerate(line) if ch == "+"]
            continue
        if columns is not None:
            row.append(line)
    return out  # a row the chunk cut at its end (no border after it) is not used either


def _cells(line: str, columns: list[int]) -> list[str]:
    """A row line's cells: between its bars when it has one a column (the text of a cell can be
    shorter than the border's column, once its inline markup is read as plain text), else where the
    border's columns are (a cell whose text holds a bar, ``"x | y"``)."""
    if line.count("|") == len(columns) and line.startswith("|") and line.endswith("|"):
        return [cell.strip() for cell in line[1:-1].split("|")]
    return [line[left + 1 : right].strip() for left, right in itertools.pairwise(columns)]


def _row(row: list[str], columns: list[int]) -> list[str]:
    cells = [" ".join(p for p in parts if p) for parts in zip(*(_cells(line, columns) for line in row), strict=True)]
    if not cells or not cells[0]:
        return []  # a row with no first cell continues one the chunk boundary cut
    cells = [c for c in cells if c and not _NOTES.match(c)]
    text = cells[0]
    for n, cell in enumerate(cells[1:]):
        # the first after a dash, the next after a mark that ends the one before ("name. Writable")
        text += " — " + cell if n == 0 else ("" if _ENDED.search(text) else ";") + " " + cell
    return [" ".join(text.split()) if _ENDED.search(text) else " ".join(text.split()) + "."]
