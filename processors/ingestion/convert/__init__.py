"""Converters: the files users have (PDF, Word, PowerPoint, web pages, Markdown, plain text) into text.

Each converter is a well-kept library behind one small function, ``open_<kind>(path) -> Opened``:
opening checks that the file is what its suffix says (a corrupt or empty file is refused here,
with its path and why, before anything is sent) and finds its title; ``read()`` then yields the
text in pieces, with a ``Heading`` wherever a section starts, so titles and section headings
travel as metadata rather than as sentences of the text.

Libraries: pypdf (PDF; as good as pdfminer.six on LibreOffice's PDFs and faster, pure Python),
markdown-it-py (Markdown), charset-normalizer (text that is not UTF-8); python-docx, python-pptx
and trafilatura (web pages without navigation, scripts and footers) are heavier, so they come
with the ``documents`` extra, and a file that needs one names the ``pip install`` line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragbus.config.settings import ConvertSettings

from ..errors import UnreadableDocument, UnsupportedFormat
from .html import open_html
from .images import FORMATS as IMAGE_SUFFIXES
from .images import open_image
from .markdown import open_markdown
from .office import open_docx, open_pptx
from .pdf import open_pdf
from .pieces import EXTRA_HINT, Heading, Opened, Page, Piece
from .text import open_text

__all__ = ["EXTRA_HINT", "PAGED_SUFFIXES", "SUFFIXES", "Heading", "Opened", "Page", "Piece", "convert"]

CONVERTERS: dict[str, Callable[[Path], Opened]] = {
    ".txt": open_text, ".text": open_text, ".rst": open_text,
    ".md": open_markdown, ".markdown": open_markdown,
    ".html": open_html, ".htm": open_html,
    ".docx": open_docx,
    ".pptx": open_pptx,
}
# The kinds read a page at a time, some pages by OCR: they take the conversion settings.
PAGED: dict[str, Callable[[Path, ConvertSettings], Opened]] = {
    ".pdf": open_pdf,
    **{suffix: open_image for suffix in IMAGE_SUFFIXES},
}
PAGED_SUFFIXES = tuple(PAGED)
SUFFIXES = tuple(CONVERTERS) + PAGED_SUFFIXES


def convert(path: Path, settings: ConvertSettings | None = None) -> Opened:
    """The converter for ``path``'s suffix, opened; ``UnsupportedFormat``, ``UnreadableDocument`` (or
    ``OSError``) says why not. ``settings``: how pages without text and images are read (``[convert]``)."""
    suffix = path.suffix.lower()
    paged = PAGED.get(suffix)
    opener = CONVERTERS.get(suffix)
    if opener is None and paged is None:
        raise UnsupportedFormat(f"{path}: unsupported file type {suffix or '(no suffix)'!r}; "
                                f"ragbus reads {' '.join(SUFFIXES)}")
    if path.stat().st_size == 0:
        raise UnreadableDocument(f"{path}: empty file")
    try:
        if paged is not None:
            return paged(path, settings or ConvertSettings())
        assert opener is not None
        return opener(path)
    except UnreadableDocument:
        raise
    except ValueError as exc:  # the converters' own refusals: corrupt, binary, no text, a missing extra
        raise UnreadableDocument(str(exc)) from None
