"""Documents from files: what ``ragbus ingest`` reads.

With no path, the corpus is the Python language reference that ships with
every Python (``pydoc_data.topics``: 79 topics), so a fresh machine has
something to ask about. Files: ``.txt``, ``.md``, ``.rst``, ``.html``/``.htm``
(tags stripped) and ``.pdf`` when ``pypdf`` is installed; folders are walked.
A file that cannot be read or decoded is reported with why, and the others go on.
"""

from __future__ import annotations

import html.parser
from collections.abc import Iterator
from pathlib import Path

from schema import DEFAULT_COLLECTION, Document

TEXT_SUFFIXES = {".txt", ".md", ".rst", ".text"}
HTML_SUFFIXES = {".html", ".htm"}
BUILTIN_PREFIX = "pydoc:"


def document_id(name: str | Path) -> str:
    """The id ``ingest`` gives a document, and so the one ``delete`` must ask for.

    ``pydoc:TOPIC`` for a topic of the built-in corpus; otherwise a file's
    absolute path with symlinks resolved, so that ``docs/a.txt`` ingested in
    one directory is deleted as ``./a.txt`` from another, and one file
    reached by two paths is one document.
    """
    if isinstance(name, str) and name.startswith(BUILTIN_PREFIX):
        return name
    return str(Path(name).resolve())


class _TextOnly(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        if tag in ("p", "div", "br", "li", "h1", "h2", "h3", "h4", "tr", "section"):
            self.parts.append("\n\n")
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data.strip()
        elif not self._skip:
            self.parts.append(data)


def read_document(path: Path, collection: str) -> Document:
    """One file as a Document; raises ``ValueError`` saying what is wrong with it."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        try:
            from pypdf import PdfReader
        except ImportError:
            raise ValueError(f"{path}: reading PDF needs `pip install pypdf`") from None
        text = "\n\n".join(page.extract_text() or "" for page in PdfReader(path).pages)
        title = path.stem
    else:
        raw = path.read_bytes()
        if b"\x00" in raw[:8192]:
            raise ValueError(f"{path}: looks binary, not text")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        title = path.stem
        if suffix in HTML_SUFFIXES:
            parser = _TextOnly()
            parser.feed(text)
            text, title = "".join(parser.parts), parser.title or title
    if not text.strip():
        raise ValueError(f"{path}: no text")
    return Document(document_id=document_id(path), text=text, title=title, collection=collection, source=str(path))


def builtin_corpus(collection: str) -> list[Document]:
    import pydoc_data.topics

    return [
        Document(document_id=document_id(BUILTIN_PREFIX + name), text=text, title=name, collection=collection, source="pydoc_data.topics")
        for name, text in sorted(pydoc_data.topics.topics.items())
    ]


def find_files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            for p in sorted(path.rglob("*")):
                if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf"}:
                    yield p
        else:
            yield path  # a named file is read whatever its suffix; missing ones are reported


def load_documents(paths: list[str], collection: str = DEFAULT_COLLECTION) -> tuple[list[Document], list[str]]:
    """The documents to ingest and the files that could not be read (with why)."""
    if not paths:
        return builtin_corpus(collection), []
    documents, failed = [], []
    for path in find_files([Path(p) for p in paths]):
        try:
            documents.append(read_document(path, collection))
        except (OSError, ValueError) as exc:
            failed.append(str(exc) if isinstance(exc, ValueError) else f"{path}: {exc.strerror or exc}")
    return documents, failed
