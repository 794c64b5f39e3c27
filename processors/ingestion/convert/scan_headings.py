"""Headings on scanned pages, from the size of their type, as font sizes give them on a PDF's text layer.

Tesseract says how large each line's type is (hOCR's ``x_size``). The body size is the median of the
document's words so far; a paragraph of one short line whose type is ``HEADING_SCALE`` times larger, not
ending as a sentence's line does, heads a section, and a larger one heads those above it. Sizes within
``SAME_LEVEL`` of each other are one level (a scan's estimates of one style differ by a pixel or two). A
scan without an outline gets its sections this way; one with an outline keeps the outline's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from .pieces import Outline, Piece
from .scan_tables import Block, said

# A line whose type is this much larger than the body's is a heading. On the evaluation set's dev scans
# Tesseract sizes LibreOffice's headings 53.5 to 59 px against a body of 45 to 46: 1.16 to 1.31 times.
HEADING_SCALE = 1.12
# Sizes this close (a share of the larger) are one heading level.
SAME_LEVEL = 0.08
# A heading is a line of at most this many words.
MAX_WORDS = 15


class ScanHeadings:
    """The pieces of a document's scanned pages, one page at a time, its headings found by their size."""

    def __init__(self, title: str = "") -> None:
        self.title = " ".join(title.split())
        self.sizes: Counter[int] = Counter()  # words by their type's size in whole pixels
        self.levels: list[float] = []  # a size for each heading level met so far
        self.outline = Outline()

    def pieces(self, blocks: Sequence[Block], *, first: bool = False) -> Iterator[Piece]:
        """``blocks`` (a page) as text and headings; ``first``: the document's first page (its title's)."""
        for block in blocks:
            if block.size and not block.rows:
                self.sizes[round(block.size)] += block.words
        body = _median(self.sizes)
        text: list[Block] = []
        for block in blocks:
            if not self._heads(block, body):
                text.append(block)
                continue
            if first and " ".join(block.text.split()) == self.title:  # the document's title, not a section's
                continue
            if text:
                yield said(text) + "\n\n"
                text = []
            yield self.outline.enter(-round(self._level(block.size) * 10), " ".join(block.text.split()))
        if text:
            yield said(text)

    @staticmethod
    def _heads(block: Block, body: float) -> bool:
        return (bool(body) and not block.rows and block.lines == 1 and block.words <= MAX_WORDS
                and block.size >= HEADING_SCALE * body and any(ch.isalpha() for ch in block.text)
                and block.text.rstrip()[-1:] not in ".,;:")  # a sentence's line, not a heading

    def _level(self, size: float) -> float:
        """The size standing for ``size``'s level: a level met before within ``SAME_LEVEL``, else a new one."""
        for known in self.levels:
            if abs(known - size) <= SAME_LEVEL * max(known, size):
                return known
        self.levels.append(size)
        return size


def _median(counts: Counter[int]) -> float:
    """The median of the values ``counts`` counts (0 for none)."""
    total = sum(counts.values())
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if 2 * seen >= total:
            return float(value)
    return 0.0
