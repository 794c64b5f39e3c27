"""Documents from files: what ``ragbus ingest`` reads.

With no path, the corpus is the Python language reference that ships with
every Python (``pydoc_data.topics``: 79 topics), so a fresh machine has
something to ask about. Files: ``.txt``, ``.md``, ``.rst``, ``.html``/``.htm``
(tags stripped) and ``.pdf`` when ``pypdf`` is installed; folders are walked.
A file that cannot be read or decoded is reported with why, and the others go on.

A file becomes a ``DocumentSource``: its id and title now, its text only
while it is sent, in blocks (a page at a time for a PDF), so a 20 MB file is
never held whole, let alone several times. A text file is checked once up
front, by decoding it block by block without keeping the text, so that a bad
byte deep inside is reported before any of the file is sent.
"""

from __future__ import annotations

import codecs
import html.parser
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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

# Characters read at a time: what streaming a document holds beyond the part being sent.
BLOCK_CHARS = 1 << 16
# The title of an HTML file is looked for in its first this many bytes.
_TITLE_WITHIN = 1 << 20


@dataclass(frozen=True, slots=True)
class DocumentSource:
    """A document to ingest whose text is read only when it is sent, in pieces, in order."""

    document_id: str
    title: str
    collection: str
    source: str
    # About how many characters ``read`` yields (a file's size in bytes): for progress only.
    size: int
    read: Callable[[], Iterator[str]]

    @classmethod
    def of(cls, doc: Document) -> DocumentSource:
        """A document already in memory."""
        return cls(doc.document_id, doc.title, doc.collection, doc.source, len(doc.text), lambda: iter((doc.text,)))


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

    def take(self) -> str:
        text = "".join(self.parts)
        self.parts.clear()
        return text


def _text_blocks(path: Path) -> Iterator[str]:
    # newline="": the text as it is in the file, line endings included, as a whole-file decode gives it.
    with open(path, encoding="utf-8", newline="") as f:
        while block := f.read(BLOCK_CHARS):
            yield block


def _html_blocks(path: Path) -> Iterator[str]:
    parser = _TextOnly()
    for block in _text_blocks(path):
        parser.feed(block)
        if text := parser.take():
            yield text
    parser.close()
    if text := parser.take():
        yield text


def _html_title(path: Path) -> str:
    parser = _TextOnly()
    seen = 0
    for block in _text_blocks(path):
        parser.feed(block)
        parser.parts.clear()
        seen += len(block)
        if (parser.title and not parser._in_title) or seen >= _TITLE_WITHIN:
            break
    return parser.title


def _pdf_pages(path: Path) -> Iterator[str]:
    from pypdf import PdfReader

    for i, page in enumerate(PdfReader(path).pages):
        yield ("\n\n" if i else "") + (page.extract_text() or "")


def _check_text(path: Path, *, need_text: bool) -> None:
    """Raise ``ValueError`` if the file is binary or not UTF-8 (or, with ``need_text``, blank); keeps nothing."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, has_text = 0, False
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            if offset == 0 and b"\x00" in block[:8192]:
                raise ValueError(f"{path}: looks binary, not text")
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(block)
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}: not UTF-8 ({exc.reason} at byte {offset - pending + exc.start})") from None
            has_text = has_text or (bool(text) and not text.isspace())
            offset += len(block)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 ({exc.reason} at the end)") from None
    if need_text and not has_text:
        raise ValueError(f"{path}: no text")


def open_document(path: Path, collection: str) -> DocumentSource:
    """One file as a ``DocumentSource``; raises ``ValueError`` (or ``OSError``) saying what is wrong with it."""
    suffix = path.suffix.lower()
    size = path.stat().st_size
    title = path.stem
    read: Callable[[], Iterator[str]]
    if suffix == ".pdf":
        try:
            import pypdf  # noqa: F401
        except ImportError:
            raise ValueError(f"{path}: reading PDF needs `pip install pypdf`") from None
        read = lambda: _pdf_pages(path)  # noqa: E731
    elif suffix in HTML_SUFFIXES:
        _check_text(path, need_text=False)  # what the tags leave is known only once parsed: the chunker says
        title = _html_title(path) or title
        read = lambda: _html_blocks(path)  # noqa: E731
    else:
        _check_text(path, need_text=True)
        read = lambda: _text_blocks(path)  # noqa: E731
    return DocumentSource(document_id(path), title, collection, str(path), size, read)


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


def load_documents(
    paths: list[str], collection: str = DEFAULT_COLLECTION
) -> tuple[list[DocumentSource], list[str]]:
    """The documents to ingest (not yet read) and the files that cannot be (with why)."""
    if not paths:
        return [DocumentSource.of(d) for d in builtin_corpus(collection)], []
    documents, failed = [], []
    for path in find_files([Path(p) for p in paths]):
        try:
            documents.append(open_document(path, collection))
        except (OSError, ValueError) as exc:
            failed.append(str(exc) if isinstance(exc, ValueError) else f"{path}: {exc.strerror or exc}")
    return documents, failed
