"""A converted file a page at a time, and each page as the pieces that carry it back within the bus's limit.

``PageReader`` runs on the conversion's own thread: it reads the converter's pieces up to the next page
and returns that page's text and headings, so the worker never holds more than one page. ``page_pieces``
cuts a page too long for one message into several, its sections with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ragbus.config.settings import ConvertSettings
from ragbus.ingestion.convert import Heading, Page, Piece, convert
from ragbus.schema import ConvertPiece, Section, encode

# What a piece's fields may grow by over the one sized (the text's msgpack prefix, numbers): ample.
_GROWTH = 64


class PageText(NamedTuple):
    page: Page | None  # None: a kind without pages (its text as one), or text met before the first page
    text: str
    sections: list[Section]  # offsets within ``text``


class PageReader:
    """The pages of one file, read on one thread (the converter's generator is not shared between threads
    at once: every call goes through the conversion's ``OneThread``)."""

    def __init__(self, path: Path, settings: ConvertSettings) -> None:
        self.path = path
        self.settings = settings
        self._pieces: Iterator[Piece] | None = None
        self._next_page: Page | None = None
        self._ended = False

    def open(self) -> str:
        """Open the file (``convert``'s errors as it raises them); its title ("" = none)."""
        opened = convert(self.path, self.settings)
        self._pieces = opened.read()
        return opened.title

    def next_page(self) -> PageText | None:
        """The next page's text and sections; None once the file is read."""
        assert self._pieces is not None, "open() first"
        if self._ended:
            return None
        page, self._next_page = self._next_page, None
        texts: list[str] = []
        sections: list[Section] = []
        held = 0
        for piece in self._pieces:
            if isinstance(piece, Page):
                if page is None and not texts and not sections:
                    page = piece
                    continue
                self._next_page = piece
                return PageText(page, "".join(texts), sections)
            if isinstance(piece, Heading):
                sections.append(Section(offset=held, heading=list(piece.path)))
            elif piece:
                texts.append(piece)
                held += len(piece)
        self._ended = True
        if page is None and not texts and not sections:
            return None
        return PageText(page, "".join(texts), sections)

    def close(self) -> None:
        if self._pieces is not None and hasattr(self._pieces, "close"):
            self._pieces.close()  # the converter's file now, not whenever the generator is collected


def _fitting(text: str, room: int) -> int:
    """How many characters of ``text`` take at most ``room`` bytes in UTF-8."""
    if len(text) * 4 <= room:
        return len(text)
    head = text[:room]
    if head.isascii():
        return len(head)
    return len(head.encode()[:room].decode("utf-8", "ignore"))


def page_pieces(page: PageText, body_room: int) -> Iterator[ConvertPiece]:
    """``page`` as pieces whose bodies fit ``body_room`` bytes: one, unless its text is too long."""
    number, pages, ocr = (page.page.number, page.page.pages, page.page.ocr) if page.page else (0, 0, False)
    # Every piece leaves room for all the page's sections: a few headings, a few hundred bytes.
    overhead = len(encode(ConvertPiece(page=number, pages=pages, ocr=ocr, continued=True,
                                       sections=page.sections))) + _GROWTH
    room = body_room - overhead
    if room < 64:
        raise ValueError(f"page {number}: its {len(page.sections)} headings leave no room for text in a message "
                         f"of {body_room} bytes")
    start, first = 0, True
    while first or start < len(page.text):
        cut = _fitting(page.text[start:start + room], room)
        if cut == 0 and start < len(page.text):
            cut = 1
        end = start + cut
        sections = [Section(offset=s.offset - start, heading=s.heading) for s in page.sections
                    if start <= s.offset < end or s.offset == end == len(page.text)]
        yield ConvertPiece(page=number, pages=pages, ocr=ocr, continued=not first, text=page.text[start:end],
                           sections=sections)
        start, first = end, False
