"""Word (.docx) by python-docx and PowerPoint (.pptx) by python-pptx.

Word: paragraphs and tables in document order; a paragraph styled ``Heading N`` starts a
section, the ``Title`` paragraph (or the file's title property) is the title. PowerPoint: one
section per slide, headed by the slide's title; the text of its other shapes, its tables and
its speaker notes. Both libraries read the whole file (a zip of XML), so it is opened once to
check it and find its title, and again when it is sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from .pieces import Heading, Opened, Outline, Piece, refused, require

_LEVEL = re.compile(r"heading\s*(\d+)", re.IGNORECASE)


def _docx(path: Path):
    docx = require("docx", path, "Word files (.docx)")
    try:
        return docx.Document(str(path))
    except Exception as exc:
        raise refused(path, "Word (.docx)", exc) from None


def _docx_pieces(document) -> Iterator[Piece]:
    from docx.table import Table

    outline = Outline()
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            rows = [" | ".join(" ".join(c.text.split()) for c in row.cells) for row in item.rows]
            yield "\n".join(r for r in rows if r.strip()) + "\n\n"
            continue
        text = item.text.strip()
        if not text:
            continue
        style = (item.style.name if item.style is not None else "") or ""
        level = _LEVEL.fullmatch(style.strip())
        if style == "Title":
            yield outline.enter(0, text)
        elif level:
            yield outline.enter(int(level[1]), text)
        else:
            yield text + "\n\n"


def _docx_title(document) -> str:
    if title := (document.core_properties.title or "").strip():
        return title
    for paragraph in document.paragraphs:
        if paragraph.style is not None and paragraph.style.name == "Title" and paragraph.text.strip():
            return paragraph.text.strip()
    return ""


def open_docx(path: Path) -> Opened:
    document = _docx(path)
    title = _docx_title(document)
    if not any(isinstance(p, str) and p.strip() for p in _docx_pieces(document)):
        raise ValueError(f"{path}: no text")
    return Opened(title, lambda: _docx_pieces(_docx(path)))


def _pptx(path: Path):
    pptx = require("pptx", path, "PowerPoint files (.pptx)")
    try:
        return pptx.Presentation(str(path))
    except Exception as exc:
        raise refused(path, "PowerPoint (.pptx)", exc) from None


def _slide_title(slide) -> str:
    shape = slide.shapes.title
    return " ".join(shape.text_frame.text.split()) if shape is not None and shape.has_text_frame else ""


def _shape_texts(shapes, skip: int | None) -> Iterator[str]:
    for shape in shapes:
        if shape.shape_id == skip:  # the title: the slide's heading already
            continue
        if getattr(shape, "shape_type", None) == 6:  # a group: its shapes in turn
            yield from _shape_texts(shape.shapes, skip)
        elif shape.has_text_frame and shape.text_frame.text.strip():
            yield shape.text_frame.text.strip()
        elif getattr(shape, "has_table", False) and shape.has_table:
            rows = [" | ".join(" ".join(c.text.split()) for c in row.cells) for row in shape.table.rows]
            yield "\n".join(r for r in rows if r.strip())


def _pptx_pieces(presentation) -> Iterator[Piece]:
    for number, slide in enumerate(presentation.slides, 1):
        yield Heading((_slide_title(slide) or f"Slide {number}",))
        title = slide.shapes.title
        for text in _shape_texts(slide.shapes, title.shape_id if title is not None else None):
            yield text + "\n\n"
        if slide.has_notes_slide and (notes := slide.notes_slide.notes_text_frame.text.strip()):
            yield notes + "\n\n"


def open_pptx(path: Path) -> Opened:
    presentation = _pptx(path)
    title = (presentation.core_properties.title or "").strip()
    if not title:
        title = next((t for s in presentation.slides if (t := _slide_title(s))), "")
    if not any(isinstance(p, str) and p.strip() for p in _pptx_pieces(presentation)):
        raise ValueError(f"{path}: no text")
    return Opened(title, lambda: _pptx_pieces(_pptx(path)))
