"""Markdown: headings become sections (metadata), not sentences of the text.

markdown-it-py (CommonMark) finds the headings, ATX (``## Warranty``) and setext alike, and
where their lines are; the text sent is the source without those lines, so an answer never
echoes ``## How long is the warranty?`` as if it were a sentence of the document. The first
level-1 heading is the title. A Markdown file is parsed whole (as any Markdown parser needs).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .pieces import Opened, Outline, Piece
from .text import read_text


def _plain(inline) -> str:
    """A heading's text without its inline markup (``**x**``, backticks)."""
    parts = [c.content for c in (inline.children or ()) if c.type in ("text", "code_inline", "html_inline")]
    return " ".join("".join(parts).split()) or inline.content.strip()


def markdown_pieces(source: str) -> tuple[str, list[Piece]]:
    """The title (first level-1 heading, or "") and the pieces of a Markdown text."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(source)
    lines = source.splitlines(keepends=True)
    outline, title, line = Outline(), "", 0
    pieces: list[Piece] = []
    for i, token in enumerate(tokens):
        if token.type != "heading_open" or token.map is None:
            continue
        start, end = token.map
        level, text = int(token.tag[1:]), _plain(tokens[i + 1])
        if before := "".join(lines[line:start]):
            pieces.append(before)
        line = max(line, end)
        if not text:
            continue
        if level == 1 and not title:
            title = text
        pieces.append(outline.enter(level, text))
    if rest := "".join(lines[line:]):
        pieces.append(rest)
    return title, pieces


def open_markdown(path: Path) -> Opened:
    title, pieces = markdown_pieces(read_text(path))
    if not any(isinstance(p, str) and p.strip() for p in pieces):
        raise ValueError(f"{path}: no text" + (" beyond its headings" if pieces else ""))

    def read() -> Iterator[Piece]:  # parsed again rather than held: a folder's texts are not kept in memory
        return iter(markdown_pieces(read_text(path))[1])

    return Opened(title, read)
