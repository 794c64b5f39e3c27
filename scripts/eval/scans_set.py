"""The scans set (issue 51): short documents written for it, and questions over them with their evidence.

``scans/documents/<key>.toml`` holds one document: ``title``, ``split`` (dev or test: the set is halved
by document, so no document has questions in both halves) and ``[[section]]`` tables, each with a
``heading``, its ``paragraphs`` and at most one ``table`` (rows of cells, the first the header) printed
after them. ``scans/questions.jsonl`` holds the questions in ``scripts/eval/evalset.py``'s format; a
question's id is ``<key>/<n>``, and its evidence is copied verbatim from the document's ``known_text``.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from scripts.eval import evalset

HERE = Path(__file__).with_name("scans")
DOCUMENTS = HERE / "documents"
QUESTIONS = HERE / "questions.jsonl"
CELL_BAR = " | "  # how the converters say a table row: its cells joined by this
_TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})


@dataclass(frozen=True, slots=True)
class Section:
    heading: str
    paragraphs: tuple[str, ...]
    table: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class ScanDocument:
    key: str
    title: str
    split: str
    sections: tuple[Section, ...]

    @property
    def tables(self) -> list[tuple[tuple[str, ...], ...]]:
        return [s.table for s in self.sections if s.table]

    def known_text(self) -> str:
        """The text as printed, a line a paragraph: title, then each heading, its paragraphs and its
        table's rows said as the converters say them (``cell | cell | cell``)."""
        lines = [self.title]
        for s in self.sections:
            lines += [s.heading, *s.paragraphs, *(CELL_BAR.join(row) for row in s.table)]
        return "\n".join(lines)


def load_document(path: Path) -> ScanDocument:
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    sections = tuple(Section(s["heading"], tuple(s["paragraphs"]), tuple(tuple(r) for r in s.get("table", ())))
                     for s in raw["section"])
    doc = ScanDocument(path.stem, raw["title"], raw["split"], sections)
    if doc.split not in evalset.SPLITS:
        raise ValueError(f"{path}: unknown split {doc.split!r}")
    for table in doc.tables:
        if len({len(row) for row in table}) != 1:
            raise ValueError(f"{path}: a table's rows have different numbers of cells")
    return doc


def load_documents(folder: Path = DOCUMENTS) -> dict[str, ScanDocument]:
    """Key -> document, in key order."""
    return {p.stem: load_document(p) for p in sorted(folder.glob("*.toml"))}


def load_questions(path: Path = QUESTIONS) -> list[evalset.Question]:
    return evalset.load_questions(path)


def document_of(question: evalset.Question) -> str:
    """The key of the document a question is asked of (``warranty/2`` -> ``warranty``)."""
    return question.id.split("/", 1)[0]


def normalise(text: str) -> str:
    """The text as the figures compare it: Unicode NFKC (a ligature is its letters), typographic quotes and
    dashes as ASCII ones, a table's bars as spaces, white space collapsed to one space; case kept."""
    text = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHIC).replace("|", " ")
    return re.sub(r"\s+", " ", text).strip()
