"""Split a document into overlapping chunks with stable ids.

Chunks end at paragraph, then sentence, then word boundaries where one lies
in the last fifth of the window, so a chunk rarely cuts a sentence. A chunk
id is ``<document_id>#<position>``: ingesting the same document again gives
the same ids, so stores replace rather than duplicate.

A large document arrives in parts (``schema/ingest.py``). Each chunk depends
only on the text from its own start to ``size`` characters on, so a part that
is not the last is split only while a whole window lies inside its known text;
the start of the first window that does not is where the next part begins.
The chunks are then exactly those of splitting the whole document at once,
wherever the parts were cut.
"""

from __future__ import annotations

import bisect
import re

import msgspec

from ragbus.ingestion.markup import plain
from ragbus.schema import Chunk, Document

_BREAKS = (re.compile(r"\n\s*\n"), re.compile(r"(?<=[.!?])\s+"), re.compile(r"\s+"))
_SPACE = re.compile(r"\s")


def split_text(text: str, size: int, overlap: int) -> list[str]:
    """The chunks of a whole text."""
    return split_part(text, size, overlap)[0]


def split_part(text: str, size: int, overlap: int, *, first: bool = True, last: bool = True) -> tuple[list[str], int]:
    """The chunks a part of a document settles, and where in ``text`` the next part must begin.

    ``first``: the text starts the document (leading whitespace is dropped);
    ``last``: it ends it (everything is split; the returned offset is then
    ``len(text)``). Otherwise ``text`` must start where a chunk starts, as the
    offset returned for the part before says.
    """
    found, resume_at = _split(text, size, overlap, first=first, last=last)
    return [piece for _, piece in found], resume_at


def _split(text: str, size: int, overlap: int, *, first: bool, last: bool) -> tuple[list[tuple[int, str]], int]:
    """``split_part``, each chunk with the offset in ``text`` where it starts.

    ``first``: the text starts the document (leading whitespace is dropped);
    ``last``: it ends it (everything is split; the returned offset is then
    ``len(text)``). Otherwise ``text`` must start where a chunk starts, as the
    offset returned for the part before says.
    """
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be >= 0 and < chunk size {size}, got {overlap}")
    start = len(text) - len(text.lstrip()) if first else 0
    # Trailing whitespace may be the document's last (a whole document is stripped), so a part
    # that is not the last only counts on the text up to its last non-space character.
    stop = len(text.rstrip())
    pieces: list[tuple[int, str]] = []
    while start < stop:
        if not last and start + size >= stop:
            return pieces, start  # this window needs text the next part brings
        end = min(start + size, stop)
        if end < stop:
            end = _boundary(text, start, end, size)
        window = text[start:end]
        piece = window.strip()
        if piece:
            pieces.append((start + len(window) - len(window.lstrip()), piece))
        if end >= stop:
            break
        next_start = max(end - overlap, start + 1)
        # Start the next chunk on a word, not inside one.
        m = _SPACE.search(text, next_start, end)
        if m is not None and m.start() - next_start < overlap:
            next_start = m.end()
        start = next_start
    return pieces, len(text) if last else start


def _boundary(text: str, start: int, end: int, size: int) -> int:
    earliest = end - size // 5
    for pattern in _BREAKS:
        best = None
        for m in pattern.finditer(text, earliest, end):
            best = m.end()
        if best is not None and best > start:
            return best
    return end


def chunk_part(doc: Document, size: int, overlap: int) -> tuple[list[Chunk], int]:
    """The chunks of ``doc`` (a whole document, or one part of one) and where its next part begins.

    A chunk's title is its document's, followed by the headings of the section it starts in
    (``doc.sections``), so the section is searched with the title and shown with the chunk.
    """
    pieces, resume_at = _split(doc.text, size, overlap, first=doc.part == 0, last=doc.last)
    starts = [section.offset for section in doc.sections]
    chunks = [
        Chunk(
            chunk_id=f"{doc.document_id}#{position}",
            document_id=doc.document_id,
            text=piece,
            position=position,
            title=_titled(doc, bisect.bisect_right(starts, start) - 1),
            collection=doc.collection,
        )
        for position, (start, piece) in enumerate(pieces, start=doc.first_position)
    ]
    return chunks, resume_at


def as_stored(chunk: Chunk) -> Chunk:
    """``chunk`` as the stores hold it: cut (and embedded) as written, its text stored with the inline
    markup read as plain text (``*key*`` as ``key``: ``processors/ingestion/markup.py``)."""
    return msgspec.structs.replace(chunk, text=plain(chunk.text))


def _titled(doc: Document, section: int) -> str:
    """The document's title and the headings of its ``section``-th section (none when negative)."""
    if section < 0:
        return doc.title
    headings = [h for h in doc.sections[section].heading if h and h != doc.title]
    return " › ".join([doc.title, *headings]) if doc.title else " › ".join(headings)  # noqa: RUF001  (a breadcrumb)


def chunk_document(doc: Document, size: int, overlap: int) -> list[Chunk]:
    """The chunks of a whole document (or of one part of one)."""
    return chunk_part(doc, size, overlap)[0]
