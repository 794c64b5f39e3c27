"""Text from documents made safe to print on a terminal: its control characters shown escaped.

An id, a title or a source comes from whoever ingested the document (a PDF's metadata, a file's
name, an upload's field). Printed raw, ESC drives the terminal, a newline forges a row, U+202E
shows what follows reversed. ``printable`` writes each control character (those
``ragbus.schema.document_ids`` refuses in an id) as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``);
an answer or a fact keeps its line breaks and tabs (``lines=True``).
"""

from __future__ import annotations

from ragbus.schema.document_ids import is_control

_LAYOUT = frozenset("\n\t")  # what ``lines=True`` keeps


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with each control character escaped; with ``lines``, newlines and tabs kept as they are."""
    if text.isprintable():  # the usual case, at C speed (only control and format characters fail it)
        return text
    return "".join(
        c.encode("unicode_escape").decode("ascii") if is_control(c) and not (lines and c in _LAYOUT) else c
        for c in text
    )
