"""What every converter returns: the text's pieces, headings among them, and the errors they raise."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

EXTRA_HINT = "pip install 'ragbus[documents]'"


@dataclass(frozen=True, slots=True)
class Heading:
    """A section starts here; ``path`` is its heading and those it sits under, outermost first."""

    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Page:
    """Page ``number`` (from 1) of ``pages`` starts here; ``ocr``: its text is read from its image.

    Met before each page's text by the converters that read pages (PDF, images), so a caller shows
    progress a page at a time: a page read by OCR takes seconds.
    """

    number: int
    pages: int
    ocr: bool = False


Piece = str | Heading | Page


@dataclass(frozen=True, slots=True)
class Opened:
    """A file checked and ready to read: its title ("" = none found) and its text as pieces."""

    title: str
    read: Callable[[], Iterator[Piece]]


class Outline:
    """Turns headings met in order, each with its level, into their paths."""

    def __init__(self) -> None:
        self._open: list[tuple[int, str]] = []

    def enter(self, level: int, text: str) -> Heading:
        while self._open and self._open[-1][0] >= level:
            self._open.pop()
        self._open.append((level, text))
        return Heading(tuple(t for _, t in self._open))


def require(module: str, path: Path, kind: str):
    """Import ``module`` for reading ``kind`` files, or say which ``pip install`` brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"{path}: reading {kind} needs the documents extra: {EXTRA_HINT}") from None


def refused(path: Path, kind: str, exc: BaseException) -> ValueError:
    """A library's own error on a file it cannot read, as one line naming the file."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ValueError(f"{path}: not a readable {kind} file ({detail[:200]})")
