"""PDF: each page's text layer by pdfplumber, its tables a row a line, a page without text read by OCR.

- Text: pdfplumber's lines, a blank line where the gap between two is wider than a line.
- Tables (ruled ones, pdfplumber's ``find_tables``) are said a row a line, cells joined by " | ", as the
  Word and web page converters say theirs, where they stand on the page; their cells are not read twice.
- Sections: from the outline (bookmarks) when the PDF has one, else from font sizes: a short line set
  larger than the body text (or all bold) is a heading, a larger one a level above; on a scanned page,
  from the size Tesseract gives its lines' type (``scan_headings.py``).
- OCR: a page with no text layer but an image, or under ``MIN_TEXT`` characters with images over half
  its area (a scan with a stamped header), is rendered by PDFium at ``[convert] dpi`` and read by
  Tesseract (``ocr.py``). Every other page keeps its text layer and is never OCR'd.

pypdf checks the file, finds the title and the outline when it is opened (as fast as pdfminer.six
on LibreOffice's PDFs); pdfplumber (on pdfminer.six) then reads one page at a time, its caches
dropped after each and the file opened afresh every ``BATCH`` pages, so a 500-page file takes the
memory of a few pages. pdfminer.six's objects hold each other in cycles, which only a full collection
frees: in a process with a large heap those come seldom, so one is run after each closing.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any
from pathlib import Path

from ragbus.config.settings import ConvertSettings

from ..errors import UnreadableDocument
from . import ocr
from .pieces import Heading, Opened, Outline, Page, Piece, refused
from .scan_headings import ScanHeadings
from .scan_tables import Block, said

# pypdf logs what it repairs ("EOF marker not found") as warnings, pdfminer.six what it skips; a file it
# cannot read is reported by the converter, in one line, and one it can is no concern of the user's.
logging.getLogger("pypdf").setLevel(logging.ERROR)
logging.getLogger("pdfminer").setLevel(logging.ERROR)

# A page with fewer characters in its text layer than this, and images over half its area, is a scan.
MIN_TEXT = 100
# A line this much larger than the body text is a heading (LibreOffice's Heading 3 is 1.1x its body).
HEADING_SCALE = 1.08
# Pages read under one opening of the file: its memory is that of this many pages' objects at most.
BATCH = 32
# PDFium is not thread-safe: one render at a time in a process (a render takes tens of ms, OCR seconds).
_PDFIUM = threading.Lock()


def _outline(reader) -> dict[int, list[Heading]]:
    """The outline's headings by page index, in document order."""
    by_page: dict[int, list[Heading]] = {}

    def walk(items, above: tuple[str, ...]) -> None:
        last: tuple[str, ...] = above
        for item in items:
            if isinstance(item, list):
                walk(item, last)
                continue
            title = " ".join(str(getattr(item, "title", "") or "").split())
            try:
                page = reader.get_destination_page_number(item)
            except Exception:  # a bookmark to nowhere: no section, the text is read all the same
                continue
            if title and page is not None and page >= 0:
                last = (*above, title)
                by_page.setdefault(page, []).append(Heading(last))

    try:
        walk(reader.outline, ())
    except Exception:  # a broken outline costs the sections, not the text
        return {}
    return by_page


def open_pdf(path: Path, settings: ConvertSettings) -> Opened:
    from pypdf import PdfReader

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise ValueError("encrypted")
        pages = len(reader.pages)
        title = str(reader.metadata.title or "") if reader.metadata is not None else ""
        outline = _outline(reader)
    except Exception as exc:
        raise refused(path, "PDF", exc) from None
    if not pages:
        raise ValueError(f"{path}: a PDF with no pages")
    if pages > settings.max_pages:
        raise ValueError(f"{path}: {pages:,} pages, over the {settings.max_pages:,} that [convert] max_pages allows")
    title = " ".join(title.split())
    return Opened(title, lambda: _pages(path, pages, title, outline, settings))


def _pages(path: Path, pages: int, title: str, outline: dict[int, list[Heading]],
           settings: ConvertSettings) -> Iterator[Piece]:
    rendered = None
    fonts = _Fonts(title) if not outline else None
    scans = ScanHeadings(title) if not outline else None  # a scanned page's headings, by their type's size
    try:
        for index, page in _opened_pages(path, pages):
            number = index + 1
            try:
                scanned = _needs_ocr(page, settings)
                yield Page(number, pages, ocr=scanned)
                if index:
                    yield "\n\n"
                if scanned:
                    if rendered is None:
                        rendered = _pdfium(path)
                    blocks = _read_scan(rendered, index, settings)
                    if scans is not None:
                        yield from scans.pieces(blocks, first=index == 0)
                    else:
                        yield from _at_headings(said(blocks), outline.get(index, ()))
                elif fonts is not None:
                    yield from fonts.pieces(page, first=index == 0)
                else:
                    yield from _at_headings(_text(page, title if index == 0 else ""), outline.get(index, ()))
            except UnreadableDocument:
                raise
            except ValueError as exc:
                raise UnreadableDocument(f"{path}: page {number}: {exc}") from None
            except Exception as exc:  # a library failing deep in one page: the document cannot be read
                detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                raise UnreadableDocument(f"{path}: page {number} cannot be read "
                                         f"({type(exc).__name__}{': ' + detail if detail else ''})") from None
            finally:
                page.close()  # its layout and characters
    finally:
        if rendered is not None:
            with _PDFIUM:
                rendered.close()


def _opened_pages(path: Path, pages: int) -> Iterator[tuple[int, Any]]:
    """Each page's index and pdfplumber page, the file opened afresh every ``BATCH`` pages: pdfminer.six keeps
    each object it resolved (a scan's image among them) until its file is closed, and its closed file's
    objects until a full collection (a fraction of a second in a large heap, once in ``BATCH`` pages)."""
    import pdfplumber

    for first in range(0, pages, BATCH):
        numbers = list(range(first + 1, min(first + BATCH, pages) + 1))
        with pdfplumber.open(path, pages=numbers) as pdf:
            for offset, page in enumerate(pdf.pages):
                yield first + offset, page
        if first + BATCH < pages:
            gc.collect()


def _needs_ocr(page, settings: ConvertSettings) -> bool:
    """Whether ``page`` is a scan: no text layer but an image, or a few characters over a page of images."""
    if not settings.ocr:
        return False
    text = sum(1 for c in page.chars if not c["text"].isspace())
    if text >= MIN_TEXT or not page.images:
        return False
    if text == 0:
        return True
    width, height = float(page.width), float(page.height)
    covered = 0.0
    for image in page.images:
        x0, x1 = max(0.0, float(image["x0"])), min(width, float(image["x1"]))
        top, bottom = max(0.0, float(image["top"])), min(height, float(image["bottom"]))
        covered += max(0.0, x1 - x0) * max(0.0, bottom - top)
    return covered >= 0.5 * width * height


def _pdfium(path: Path):
    import pypdfium2

    with _PDFIUM:
        return pypdfium2.PdfDocument(str(path))


def _read_scan(document, index: int, settings: ConvertSettings) -> list[Block]:
    """Page ``index`` rendered at ``settings.dpi`` (less if its pixels would pass ``max_page_pixels``), read by OCR."""
    ocr.check(settings)
    with _PDFIUM:
        page = document[index]
        try:
            width, height = page.get_size()  # points: 72 an inch
            scale = settings.dpi / 72
            if width * height * scale * scale > settings.max_page_pixels:
                scale = math.sqrt(settings.max_page_pixels / (width * height))
            bitmap = page.render(scale=scale, grayscale=True)
            image = bitmap.to_pil()
            bitmap.close()
        finally:
            page.close()
    try:
        return ocr.read_image(image, settings, round(scale * 72))
    finally:
        image.close()


def _rows(table) -> str:
    rows = (" | ".join(" ".join((cell or "").split()) for cell in row) for row in table.extract())
    return "\n".join(r for r in rows if r.replace("|", "").strip())


def _blocks(page) -> list[tuple[float, dict | str]]:
    """The page's lines outside its tables, and each table's rows as one block, by where they start."""
    tables = page.find_tables()
    boxes = [t.bbox for t in tables]

    def outside(obj) -> bool:
        if obj.get("object_type") != "char":
            return True
        x, y = (obj["x0"] + obj["x1"]) / 2, (obj["top"] + obj["bottom"]) / 2
        return not any(x0 <= x <= x1 and top <= y <= bottom for x0, top, x1, bottom in boxes)

    layer = page.filter(outside) if boxes else page
    blocks: list[tuple[float, dict | str]] = [(line["top"], line) for line in layer.extract_text_lines()]
    blocks += [(t.bbox[1], _rows(t)) for t in tables]
    blocks.sort(key=lambda b: b[0])
    return blocks


def _joined(blocks: list[tuple[float, dict | str]]) -> Iterator[tuple[dict | None, str]]:
    """Each block with the text that goes before it: a line break, or a blank line after a gap or a table."""
    previous: dict | str | None = None
    for _, block in blocks:
        if previous is None:
            gap = ""
        elif isinstance(block, str) or isinstance(previous, str):
            gap = "\n\n"
        else:
            height = previous["bottom"] - previous["top"]
            gap = "\n\n" if block["top"] - previous["bottom"] > 0.8 * height else "\n"
        yield (None if isinstance(block, str) else block), gap + (block if isinstance(block, str) else block["text"])
        previous = block


def _text(page, title: str = "") -> str:
    """The page's text; a line that is ``title`` (the document's, on its first page) is left out."""
    blocks = _blocks(page)
    if title:
        blocks = [b for b in blocks if isinstance(b[1], str) or " ".join(b[1]["text"].split()) != title]
    return "".join(text for _, text in _joined(blocks)).lstrip("\n")


def _at_headings(text: str, headings: list[Heading] | tuple[Heading, ...]) -> Iterator[Piece]:
    """``text`` with each outline heading of its page where its words are found (else where the page starts)."""
    at = 0
    for heading in headings:
        found = text.find(heading.path[-1], at)
        if found < 0:
            found = at
        if found > at:
            yield text[at:found]
        yield heading
        at = found
        if text.startswith(heading.path[-1], found):  # the heading's own line is metadata, not text
            at = found + len(heading.path[-1])
    yield text[at:]


class _Fonts:
    """Headings found from font sizes, in a PDF without an outline: the body size is the one most characters
    have so far; a short line set larger (or all bold) heads a section, a larger one a level above."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.sizes: Counter[float] = Counter()
        self.outline = Outline()

    def pieces(self, page, *, first: bool) -> Iterator[Piece]:
        self.sizes.update(round(float(c["size"]), 1) for c in page.chars if not c["text"].isspace())
        body = self.sizes.most_common(1)[0][0] if self.sizes else 0.0
        for line, text in _joined(_blocks(page)):
            level = self._level(line, body) if line is not None else None
            if line is None or level is None:
                yield text
                continue
            words = " ".join(line["text"].split())
            if first and words == self.title:  # the title is the document's, not a section's
                continue
            yield self.outline.enter(level, words)

    @staticmethod
    def _level(line: dict, body: float) -> int | None:
        chars = [c for c in line["chars"] if not c["text"].isspace()]
        words = line["text"].split()
        if not chars or not body or len(words) > 15 or not any(ch.isalpha() for ch in line["text"]):
            return None
        size = sorted(float(c["size"]) for c in chars)[len(chars) // 2]
        bold = all("bold" in str(c.get("fontname", "")).lower() for c in chars)
        if size >= body * HEADING_SCALE:
            return -round(size * 2)  # larger type, a smaller level: Outline pops what is not above it
        if bold and size >= body and len(words) <= 10 and line["text"].rstrip()[-1:] not in ".,;:":
            return -round(size * 2) + 1
        return None
