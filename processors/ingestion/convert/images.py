"""Images as documents (PNG, JPEG, TIFF with any number of pages), read by OCR a page at a time.

Pillow reads an image's header first: a page of more pixels than ``max_page_pixels`` (a decompression
bomb is small on disk and gigabytes decoded) and a file of more pages than ``max_pages`` are refused
before anything is decoded. A page Pillow cannot decode (a corrupt or truncated TIFF) fails the
document saying which page. A photo's EXIF orientation is applied; Tesseract turns what is left.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

from ragbus.config.settings import ConvertSettings

from ..errors import UnreadableDocument
from . import ocr
from .pieces import Opened, Page, Piece, refused
from .scan_headings import ScanHeadings

FORMATS = {".png": ("PNG",), ".jpg": ("JPEG", "MPO"), ".jpeg": ("JPEG", "MPO"), ".tif": ("TIFF",),
           ".tiff": ("TIFF",)}
# An image with no resolution of its own is taken as a page scanned at this many dots per inch.
ASSUMED_DPI = 300


def _open(path: Path):
    from PIL import Image

    with warnings.catch_warnings():  # Pillow's own bomb warning: ours below is the one the user sees
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return Image.open(path)
        except Image.DecompressionBombError as exc:
            raise ValueError(f"{path}: refused, a decompression bomb ({str(exc).split('could be')[0].strip()})")\
                from None


def _check_size(path: Path, image, page: int, settings: ConvertSettings) -> None:
    width, height = image.size
    if width * height > settings.max_page_pixels:
        raise ValueError(f"{path}: page {page} is {width:,} x {height:,} pixels, over the "
                         f"{settings.max_page_pixels:,} that [convert] max_page_pixels allows (refused unread)")


def _dpi(image) -> int:
    dpi = image.info.get("dpi")
    try:
        value = round(float(dpi[0])) if dpi else 0
    except (TypeError, ValueError, IndexError):
        value = 0
    return value if 70 <= value <= 2400 else ASSUMED_DPI


def open_image(path: Path, settings: ConvertSettings) -> Opened:
    kind = path.suffix.lower()
    if not settings.ocr:
        raise ValueError(f"{path}: an image's text is read by OCR, which [convert] ocr = false turns off")
    try:
        ocr.check(settings)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    try:
        image = _open(path)
    except ValueError:
        raise
    except Exception as exc:
        raise refused(path, f"{kind.lstrip('.').upper()} image", exc) from None
    with image:
        if image.format not in FORMATS[kind]:
            raise ValueError(f"{path}: not a {kind.lstrip('.').upper()} image (it is {image.format or 'unknown'})")
        try:
            pages = image.n_frames if hasattr(image, "n_frames") else 1  # a TIFF walks its directory of pages
        except Exception as exc:
            raise refused(path, f"{kind.lstrip('.').upper()} image", exc) from None
        if pages > settings.max_pages:
            raise ValueError(f"{path}: {pages:,} pages, over the {settings.max_pages:,} that [convert] max_pages "
                             "allows")
        _check_size(path, image, 1, settings)
    return Opened("", lambda: _pages(path, pages, settings))


def _pages(path: Path, pages: int, settings: ConvertSettings) -> Iterator[Piece]:
    from PIL import ImageOps

    headings = ScanHeadings()
    with _open(path) as image:
        for number in range(1, pages + 1):
            try:
                image.seek(number - 1)
                _check_size(path, image, number, settings)
                page = ImageOps.exif_transpose(image) if number == 1 else image.copy()
                page.load()
            except ValueError as exc:
                raise UnreadableDocument(str(exc)) from None
            except Exception as exc:
                detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                raise UnreadableDocument(f"{path}: page {number} cannot be decoded ({detail})") from None
            yield Page(number, pages, ocr=True)
            try:
                blocks = ocr.read_image(page, settings, _dpi(image))
            except ValueError as exc:
                raise UnreadableDocument(f"{path}: page {number}: {exc}") from None
            finally:
                page.close()
            if number > 1:
                yield "\n\n"
            yield from headings.pieces(blocks, first=number == 1)
