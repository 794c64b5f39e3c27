"""Web pages: the main content only, without navigation, scripts, sidebars and footers.

trafilatura finds the page's main text (measured on rustdoc and mdBook pages, where cutting
``<nav>``/``<footer>`` tags with selectolax still kept "Keyboard shortcuts", "Skip to main
content" and the like); its Markdown output keeps the page's headings, which then become
sections as in any Markdown file. The title is the page's ``<title>`` (or its first heading).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .markdown import markdown_pieces
from .pieces import Opened, Piece, require
from .text import read_text


def _extract(path: Path) -> tuple[str, list[Piece]]:
    trafilatura = require("trafilatura", path, "web pages (.html)")
    page = read_text(path, need_text=False)
    text = trafilatura.extract(
        page, output_format="markdown", include_formatting=True, include_tables=True, include_comments=False,
        include_links=False, include_images=False,
    )
    if not text or not text.strip():
        raise ValueError(f"{path}: no text once navigation, scripts and boilerplate are removed")
    first_heading, pieces = markdown_pieces(text)
    metadata = trafilatura.extract_metadata(page)
    return (metadata.title if metadata is not None and metadata.title else first_heading), pieces


def open_html(path: Path) -> Opened:
    title, _ = _extract(path)

    def read() -> Iterator[Piece]:
        return iter(_extract(path)[1])

    return Opened(title, read)
