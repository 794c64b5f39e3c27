"""Split a document into overlapping chunks with stable ids.

Chunks end at paragraph, then sentence, then word boundaries where one lies
in the last fifth of the window, so a chunk rarely cuts a sentence. A chunk
id is ``<document_id>#<position>``: ingesting the same document again gives
the same ids, so stores replace rather than duplicate.
"""

from __future__ import annotations

import re

from schema import Chunk, Document

_BREAKS = (re.compile(r"\n\s*\n"), re.compile(r"(?<=[.!?])\s+"), re.compile(r"\s+"))


def split_text(text: str, size: int, overlap: int) -> list[str]:
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be >= 0 and < chunk size {size}, got {overlap}")
    text = text.strip()
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            end = _boundary(text, start, end, size)
        piece = text[start:end].strip()
        if piece:
            pieces.append(piece)
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
        # Start the next chunk on a word, not inside one.
        m = re.compile(r"\s").search(text, start, end)
        if m is not None and m.start() - start < overlap:
            start = m.end()
    return pieces


def _boundary(text: str, start: int, end: int, size: int) -> int:
    earliest = end - size // 5
    for pattern in _BREAKS:
        best = None
        for m in pattern.finditer(text, earliest, end):
            best = m.end()
        if best is not None and best > start:
            return best
    return end


def chunk_document(doc: Document, size: int, overlap: int) -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{doc.document_id}#{i}",
            document_id=doc.document_id,
            text=piece,
            position=i,
            title=doc.title,
            collection=doc.collection,
        )
        for i, piece in enumerate(split_text(doc.text, size, overlap))
    ]
