"""Tesseract's hOCR read into the columns of its TSV (``image_to_data``), with each word's line size.

hOCR is the one output of Tesseract that says how large each line's type is (``x_size``, its estimate of
the line's height in pixels); the TSV has only the boxes, whose heights move with a word's ascenders and
descenders. Each word gets its line's size in a ``size`` column, so headings can be told by their type.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from typing import Any

_NS = "{http://www.w3.org/1999/xhtml}"
_LINES = {"ocr_line", "ocr_header", "ocr_caption", "ocr_textfloat"}
_BBOX = re.compile(r"bbox (-?\d+) (-?\d+) (-?\d+) (-?\d+)")
_SIZE = re.compile(r"x_size ([\d.]+)")
COLUMNS = ("level", "block_num", "par_num", "line_num", "left", "top", "width", "height", "text", "size")


def words(hocr: bytes | str) -> dict[str, list[Any]]:
    """The words of ``hocr`` (level 5 rows of the TSV's columns, numbered as it numbers them), each with
    ``size``: its line's ``x_size`` (0 where Tesseract gives none)."""
    root = ElementTree.fromstring(hocr)
    data: dict[str, list[Any]] = {column: [] for column in COLUMNS}
    block = 0
    for area in root.iter(f"{_NS}div"):
        if area.get("class") != "ocr_carea":
            continue
        block += 1
        for par_num, paragraph in enumerate((p for p in area.iter(f"{_NS}p") if p.get("class") == "ocr_par"), 1):
            lines = (span for span in paragraph.iter(f"{_NS}span") if span.get("class") in _LINES)
            for line_num, line in enumerate(lines, 1):
                size = _SIZE.search(line.get("title", ""))
                for word in line.iter(f"{_NS}span"):
                    box = _BBOX.search(word.get("title", "")) if word.get("class") == "ocrx_word" else None
                    if box is None:
                        continue
                    left, top, right, bottom = (int(v) for v in box.groups())
                    row = (5, block, par_num, line_num, left, top, right - left, bottom - top,
                           "".join(word.itertext()), float(size.group(1)) if size else 0.0)
                    for column, value in zip(COLUMNS, row, strict=True):
                        data[column].append(value)
    return data
