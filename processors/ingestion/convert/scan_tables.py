"""A scanned page's text from Tesseract's words, its table rows said ``cell | cell`` as the other converters say them.

Tesseract reads a table row as one line of words. Their boxes tell the cells apart: a gap between two words
wider than ``CELL_GAP`` times the line's height, or crossed by a vertical rule (a column of the page's
pixels dark over nearly the whole line), ends a cell. A line right under such a row, with no rule between
them, whose words sit in fewer of the row's columns, is a cell's text wrapped: it joins those cells. The
rest is Tesseract's own text: lines in paragraphs, paragraphs apart by a blank line, but a line of another
size of type (a heading Tesseract put in the paragraph under it) starts a paragraph of its own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

# A gap between two words this many times their line's height apart ends a cell (prose's are under one).
CELL_GAP = 3.0
# A column of pixels between two words dark over this share of their line's height is a table's rule.
RULE_SHARE = 0.7
# A row of pixels dark over this share of a row's width, between it and the line below, is a rule (a
# line of text darkens a third of its widest row at most).
ROW_RULE_SHARE = 0.6
# A slope past this (6 degrees) is not levelled: a scanner's skew is less, so it is more likely lines
# misread, and levelling by it would pad the page by a large share of its size.
MAX_SKEW = 0.1
# Lines whose type differs by more than this share of the larger are not one paragraph.
SIZE_STEP = 0.15
# A wrapped cell's line starts within this many line heights under the line before it.
WRAP_DISTANCE = 1.5


@dataclass(slots=True)
class Word:
    left: int
    top: int
    right: int
    bottom: int
    text: str
    size: float = 0.0  # its line's type, in pixels (hOCR's x_size; 0: not known)


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph of the page as said: its text, the size of its type (its words' median; 0: not known),
    its lines and words, and whether it is a table's rows."""

    text: str
    size: float
    lines: int
    words: int
    rows: bool


@dataclass(slots=True)
class Line:
    cells: list[list[Word]]
    height: float
    top: int = 0
    bottom: int = 0

    @property
    def left(self) -> int:
        return self.cells[0][0].left

    @property
    def size(self) -> float:
        return median(w.size for cell in self.cells for w in cell)

    @property
    def right(self) -> int:
        return self.cells[-1][-1].right

    def said(self) -> str:
        return " | ".join(" ".join(w.text for w in cell) for cell in self.cells)


def page_text(data: Mapping[str, Sequence[Any]], image: Any = None) -> str:
    """The page's text from pytesseract's ``image_to_data`` dictionary (or ``hocr.words``); ``image``, the
    page Tesseract read (a Pillow image), lets a rule end a cell and keeps a row under a rule from being
    joined."""
    return said(page_blocks(data, image))


def said(blocks: Sequence[Block]) -> str:
    """Blocks as text: apart by a blank line, but a table's rows stay together, as the other converters
    give them, though Tesseract parts them."""
    parts: list[str] = []
    for before, block in zip((None, *blocks), blocks, strict=False):
        if before is not None:
            parts.append("\n" if before.rows and block.rows else "\n\n")
        parts.append(block.text)
    return "".join(parts)


def page_blocks(data: Mapping[str, Sequence[Any]], image: Any = None) -> list[Block]:
    """The page's paragraphs as ``page_text`` says them, each with the size of its type."""
    paragraphs: dict[tuple[int, int], dict[int, list[Word]]] = {}
    sizes = data.get("size")
    for i, text in enumerate(data["text"]):
        if int(data["level"][i]) != 5 or not str(text).strip():
            continue
        left, top = int(data["left"][i]), int(data["top"][i])
        word = Word(left, top, left + int(data["width"][i]), top + int(data["height"][i]), str(text).strip(),
                    float(sizes[i]) if sizes is not None else 0.0)
        key = (int(data["block_num"][i]), int(data["par_num"][i]))
        paragraphs.setdefault(key, {}).setdefault(int(data["line_num"][i]), []).append(word)
    dark = None
    if image is not None:
        read = [words for par in paragraphs.values() for words in par.values()]
        image = _upright(image, read)
        dark = _level(image, _skew(read), [w for words in read for w in words])
    lined = [[line for line in (_line(words, dark) for words in par.values()) if line.cells]
             for par in paragraphs.values()]
    _join_wrapped(lined, dark)
    blocks = []
    for paragraph in lined:
        for lines in _one_size(paragraph):
            words = [w for line in lines for cell in line.cells for w in cell]
            blocks.append(Block("\n".join(line.said() for line in lines), median(w.size for w in words),
                                len(lines), len(words), _rows(lines)))
    return blocks


def _one_size(lines: list[Line]) -> Iterator[list[Line]]:
    """A paragraph in runs of lines of one size of type: Tesseract may put a heading in the paragraph under
    it, and a line ``SIZE_STEP`` larger or smaller than the one before starts a paragraph of its own."""
    run: list[Line] = []
    for line in lines:
        if run and run[-1].size and line.size and \
                abs(line.size - run[-1].size) > SIZE_STEP * max(line.size, run[-1].size):
            yield run
            run = []
        run.append(line)
    if run:
        yield run


def _rows(lines: list[Line]) -> bool:
    return all(len(line.cells) > 1 for line in lines)


def _upright(image: Any, lines: list[list[Word]]) -> Any:
    """``image`` turned the way Tesseract read it (its boxes are the image's as given), ``lines``' words
    moved with it: the way most lines' words run, right, left, up or down, is the page's turn."""
    from PIL import Image

    runs = {"right": 0, "left": 0, "down": 0, "up": 0}
    for words in lines:
        for a, b in itertools.pairwise(words):
            dx, dy = (b.left + b.right - a.left - a.right) / 2, (b.top + b.bottom - a.top - a.bottom) / 2
            runs[("right" if dx > 0 else "left") if abs(dx) >= abs(dy) else ("down" if dy > 0 else "up")] += 1
    run = max(runs, key=lambda k: runs[k])
    if run == "right" or not runs[run]:
        return image
    width, height = image.size
    turn, move = {
        "left": (Image.Transpose.ROTATE_180, lambda x, y: (width - x, height - y)),
        "up": (Image.Transpose.ROTATE_270, lambda x, y: (height - y, x)),  # a quarter turn clockwise
        "down": (Image.Transpose.ROTATE_90, lambda x, y: (y, width - x)),  # and anticlockwise
    }[run]
    for words in lines:
        for word in words:
            (x0, y0), (x1, y1) = move(word.left, word.top), move(word.right, word.bottom)
            word.left, word.right, word.top, word.bottom = min(x0, x1), max(x0, x1), min(y0, y1), max(y0, y1)
    return image.transpose(turn)


def _skew(lines: list[list[Word]]) -> float:
    """The page's tilt, the slope of its lines (down to the right is positive): the median over lines of
    several words of the median slope between their words' bottoms (a descender moves one word, not it)."""
    slopes = []
    for words in lines:
        if len(words) < 3 or not _left_to_right(words):
            continue
        pairs = [((b.bottom - a.bottom) / ((b.left + b.right - a.left - a.right) / 2))
                 for i, a in enumerate(words) for b in words[i + 1:] if b.left + b.right > a.left + a.right]
        if pairs:
            slopes.append(median(pairs))
    return median(slopes) if slopes else 0.0


def _level(image: Any, slope: float, words: list[Word]) -> Any:
    """The page turned level by ``slope`` as an array of ink (True), ``words`` moved onto it in place."""
    import numpy
    from PIL import Image

    grey = image.convert("L")
    if abs(slope) < 1e-3 or abs(slope) > MAX_SKEW:  # under a pixel's drift over a page, or not a skew
        return numpy.asarray(grey) < 128
    angle = math.atan(slope)
    cos, sin = math.cos(angle), math.sin(angle)
    width, height = grey.size
    pad = math.ceil(abs(sin) * max(width, height)) + 1
    # A pixel (x', y') of the level page is the original's at R(angle) (x' - pad, y' - pad).
    level = grey.transform((width + 2 * pad, height + 2 * pad), Image.Transform.AFFINE,
                           (cos, -sin, -cos * pad + sin * pad, sin, cos, -sin * pad - cos * pad),
                           resample=Image.Resampling.NEAREST, fillcolor=255)
    for word in words:
        corners = [(x * cos + y * sin + pad, -x * sin + y * cos + pad)
                   for x in (word.left, word.right) for y in (word.top, word.bottom)]
        word.left, word.right = round(min(c[0] for c in corners)), round(max(c[0] for c in corners))
        word.top, word.bottom = round(min(c[1] for c in corners)), round(max(c[1] for c in corners))
    return numpy.asarray(level) < 128


def _line(words: list[Word], dark: Any) -> Line:
    height = max(1.0, median(w.bottom - w.top for w in words))
    line = Line([], height, min(w.top for w in words), max(w.bottom for w in words))
    if not _left_to_right(words):  # a page Tesseract turned: its boxes are not along the line
        line.cells = [words]
        return line
    before: Word | None = None
    cut = True
    for word in words:
        if word.text == "|":  # a rule Tesseract read as a character
            cut = True
            continue
        if before is not None and (word.left - before.right >= CELL_GAP * height
                                   or _rule_between(before, word, line, dark)):
            cut = True
        if cut:
            line.cells.append([word])
        else:
            line.cells[-1].append(word)
        cut, before = False, word
    return line


def _left_to_right(words: list[Word]) -> bool:
    return all(b.left >= a.left for a, b in itertools.pairwise(words)) and \
        sum(w.right - w.left for w in words) >= sum(w.bottom - w.top for w in words)


def _rule_between(before: Word, word: Word, line: Line, dark: Any) -> bool:
    if dark is None or word.left - before.right < 2:
        return False
    band = dark[line.top:line.bottom, before.right + 1:word.left]
    return band.size > 0 and float(band.mean(axis=0).max()) >= RULE_SHARE


def _join_wrapped(paragraphs: list[list[Line]], dark: Any) -> None:
    """Lines that are a table row's cells wrapped join the row, and leave their paragraph."""
    row: Line | None = None
    last: Line | None = None  # the row, or the line last joined to it
    for lines in paragraphs:
        kept = []
        for line in lines:
            if row is not None and last is not None and _wraps(row, last, line, dark):
                for cell in line.cells:
                    row.cells[_column(row, cell[0].left)].extend(cell)
                last = line
                continue
            kept.append(line)
            row = line if len(line.cells) > 1 else None
            last = row
        lines[:] = kept


def _wraps(row: Line, last: Line, line: Line, dark: Any) -> bool:
    """Whether ``line`` is text of ``row``'s cells carried over: under it, no rule between, fewer cells,
    each in a column of its own and short of the next."""
    if len(line.cells) >= len(row.cells) or line.top - last.bottom > WRAP_DISTANCE * row.height:
        return False
    if line.left < row.left - row.height or line.right > _row_right(row) + row.height:
        return False
    columns = [_column(row, cell[0].left) for cell in line.cells]
    if len(set(columns)) != len(columns) or columns != sorted(columns):
        return False
    starts = [cell[0].left for cell in row.cells]
    for column, cell in zip(columns, line.cells, strict=True):  # a cell's text stays in its column
        if column + 1 < len(starts) and cell[-1].right > starts[column + 1] - row.height / 2:
            return False
    if dark is not None:  # from the middle of one line to the middle of the next: their boxes may overlap
        band = dark[(last.top + last.bottom) // 2:(line.top + line.bottom) // 2, row.left:_row_right(row)]
        if band.size and float(band.mean(axis=1).max()) >= ROW_RULE_SHARE:
            return False
    return True


def _row_right(row: Line) -> int:
    return max(w.right for cell in row.cells for w in cell)


def _column(row: Line, left: int) -> int:
    """The row's cell whose column ``left`` falls in: the last that starts before it (less half a line)."""
    starts = [cell[0].left for cell in row.cells]
    column = 0
    for i, start in enumerate(starts):
        if left >= start - row.height / 2:
            column = i
    return column
