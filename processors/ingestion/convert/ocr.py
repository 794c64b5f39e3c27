"""OCR: the text of one page image, by Debian's Tesseract (``tesseract-ocr``) through pytesseract.

One ``tesseract`` process a page, so a page it cannot read, a crash or a page past ``page_timeout_s``
fails that page, never the process that asked. ``--psm 1`` finds the page's orientation first: a scan
fed in sideways or upside down reads as an upright one does. One thread a page (OMP_THREAD_LIMIT=1):
conversion scales by workers, and Tesseract's OpenMP threads on a busy host only contend. Tesseract
gives its words with their boxes and each line's size (hOCR, ``hocr.py``), from which ``scan_tables``
says the page, a table a row a line.
"""

from __future__ import annotations

import functools
import os
import xml.etree.ElementTree as ElementTree
import tempfile
from pathlib import Path

from ragbus.config.settings import ConvertSettings

from . import hocr
from .scan_tables import Block, page_blocks

INSTALL = "apt-get install tesseract-ocr tesseract-ocr-eng"


class OcrUnavailable(ValueError):
    """Tesseract, or a language the settings name, is not installed: says which package brings it."""


@functools.cache
def _languages() -> frozenset[str]:
    import pytesseract

    try:
        return frozenset(pytesseract.get_languages())
    except pytesseract.TesseractNotFoundError:
        raise OcrUnavailable(f"reading a page without text needs Tesseract, which is not installed: {INSTALL}") \
            from None


def check(settings: ConvertSettings) -> None:
    """Tesseract and every language of ``settings.language`` are there (else ``OcrUnavailable`` says which
    package brings them), and ``osd``, which finds a page's orientation."""
    have = _languages()
    missing = [code for code in (*settings.language.split("+"), "osd") if code not in have]
    if missing:
        raise OcrUnavailable(
            f"Tesseract has no {', '.join(missing)} language data: apt-get install "
            + " ".join(f"tesseract-ocr-{code.replace('_', '-')}" for code in missing)
        )


def read_image(image, settings: ConvertSettings, dpi: int) -> list[Block]:
    """The paragraphs Tesseract reads on ``image`` (a Pillow image, any mode) scanned at ``dpi``, as
    ``scan_tables`` says them (``scan_tables.said`` makes them text), each with the size of its type.

    Raises ``ValueError`` saying what went wrong: the time-out, or Tesseract's own first line.
    """
    import pytesseract

    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    if image.mode not in ("1", "L", "RGB"):
        image = image.convert("RGB")
    with tempfile.TemporaryDirectory(prefix="ragbus-ocr-") as folder:
        page = Path(folder) / "page.pnm"  # written in milliseconds, where a PNG of a page takes tens
        image.save(page)
        try:
            read = pytesseract.image_to_pdf_or_hocr(
                str(page), lang=settings.language, config=f"--psm 1 --dpi {max(dpi, 70)}",
                timeout=settings.page_timeout_s, extension="hocr",
            )
        except RuntimeError as exc:
            if "timeout" in str(exc).lower():
                raise ValueError(f"OCR took longer than [convert] page_timeout_s = {settings.page_timeout_s:g} s")\
                    from None
            raise ValueError(f"OCR failed: {str(exc).strip().splitlines()[0][:200]}") from None
        except pytesseract.TesseractError as exc:
            detail = " ".join(str(exc.message).split())[:200] or f"tesseract exited with {exc.status}"
            raise ValueError(f"OCR failed: {detail}") from None
    try:
        words = hocr.words(read)
    except ElementTree.ParseError as exc:
        raise ValueError(f"OCR failed: Tesseract's hOCR cannot be read ({exc})") from None
    return page_blocks(words, image)
