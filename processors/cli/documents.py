"""Documents from files: what ``ragbus ingest`` reads.

With no path, the corpus is the Python language reference that ships with
every Python (``pydoc_data.topics``: 79 topics), so a fresh machine has
something to ask about. Files are converted by the converters of
``processors/cli/convert`` (PDF, Word, PowerPoint, web pages, Markdown, text);
folders are walked (hidden files and folders left out). A file that cannot be
read, is empty, corrupt or of a type no converter reads is reported with its
path and why, and the others go on.

A file becomes a ``DocumentSource``: its id and title now, its text only
while it is sent, in blocks (a page at a time for a PDF), so a 20 MB file is
never held whole, let alone several times. The section headings met while
reading are kept in ``sections``, each with the offset in the text where its
section starts.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schema import DEFAULT_COLLECTION, Document

from .convert import SUFFIXES, Heading, Piece, convert

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


@dataclass(frozen=True, slots=True)
class Section:
    """Where in a document's text a section starts, and its heading path (outermost first)."""

    offset: int
    heading: tuple[str, ...]


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
    # The sections met by the last ``read``, filled as it goes.
    sections: list[Section] = field(default_factory=list, compare=False)
    # "sha256:<hex>" of the file's bytes (of title and text for a document from memory): the same
    # hash as the library holds means the stores hold this content already.
    content_hash: str = ""

    @classmethod
    def of(cls, doc: Document) -> DocumentSource:
        """A document already in memory."""
        digest = hashlib.sha256(doc.title.encode() + b"\0" + doc.text.encode()).hexdigest()
        return cls(doc.document_id, doc.title, doc.collection, doc.source, len(doc.text), lambda: iter((doc.text,)),
                   content_hash=f"sha256:{digest}")


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def _texts(pieces: Iterator[Piece], sections: list[Section]) -> Iterator[str]:
    """The text of a converter's pieces; each heading goes to ``sections`` at the offset it is met."""
    sections.clear()
    offset = 0
    for piece in pieces:
        if isinstance(piece, Heading):
            sections.append(Section(offset, piece.path))
        elif piece:
            offset += len(piece)
            yield piece


def open_document(path: Path, collection: str) -> DocumentSource:
    """One file as a ``DocumentSource``; raises ``ValueError`` (or ``OSError``) saying what is wrong with it."""
    opened = convert(path)
    sections: list[Section] = []
    return DocumentSource(
        document_id(path), opened.title or path.stem, collection, str(path), path.stat().st_size,
        lambda: _texts(opened.read(), sections), sections, file_hash(path),
    )


def builtin_corpus(collection: str) -> list[Document]:
    import pydoc_data.topics

    return [
        Document(document_id=document_id(BUILTIN_PREFIX + name), text=text, title=name, collection=collection, source="pydoc_data.topics")
        for name, text in sorted(pydoc_data.topics.topics.items())
    ]


def find_files(paths: list[Path], skipped: list[str]) -> Iterator[Path]:
    """The files to read: each named file, and the files under each folder except hidden ones.

    A named path that does not exist, a file under a folder of a type no converter reads, and
    a link that cannot be followed go to ``skipped`` with why. Links under a folder are
    followed, to files and to folders alike (also outside the folder named), as ``cp -L`` or
    ``find -L`` would; each file and folder is read once, however many links reach it. A link
    to a folder that holds it (a loop, which ``find -L`` would report too), and a link whose
    target is missing, are skipped.
    """
    seen_files: set[Path] = set()
    walked: set[Path] = set()
    for path in paths:
        if path.is_dir():
            yield from _walk(path, path.resolve(), skipped, seen_files, walked)
        elif not path.exists():
            skipped.append(f"{path}: {_missing(path)}")
        elif _first_time(path, seen_files):
            yield path  # a named file is read whatever its suffix: the converters say if they cannot


def _missing(path: Path) -> str:
    """Why ``path`` cannot be read: a link to nothing, a chain of links that loops, or nothing there."""
    if not path.is_symlink():
        return "no such file or directory"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"symbolic link to {os.readlink(path)}, a chain of links that loops; not followed"
    return f"symbolic link to {os.readlink(path)}, which does not exist"


def _first_time(path: Path, seen: set[Path]) -> bool:
    real = path.resolve()
    if real in seen:
        return False
    seen.add(real)
    return True


def _walk(folder: Path, real: Path, skipped: list[str], seen_files: set[Path], walked: set[Path]) -> Iterator[Path]:
    """The files under ``folder`` (whose path with links resolved is ``real``), in name order.

    Hand-written rather than ``Path.rglob``: rglob (Python 3.11) does not follow links to folders,
    and ``os.walk(followlinks=True)`` follows a loop until the path is too long; here each folder's
    resolved path is walked once, and a link back into a folder being walked is named as a loop.
    """
    if real in walked:
        return
    walked.add(real)
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        skipped.append(f"{folder}: {exc.strerror or exc}")
        return
    for p in entries:
        if p.name.startswith("."):
            continue
        if p.is_symlink():
            if not p.exists():
                skipped.append(f"{p}: {_missing(p)}")
                continue
            target = p.resolve()
            if target.is_dir() and (real == target or target in real.parents):
                skipped.append(f"{p}: symbolic link to {os.readlink(p)}, a folder that holds it (a loop); "
                               "not followed")
                continue
        if p.is_dir():
            yield from _walk(p, p.resolve(), skipped, seen_files, walked)
        elif not p.is_file() or not _first_time(p, seen_files):
            continue
        elif p.suffix.lower() in SUFFIXES:
            yield p
        else:
            skipped.append(f"{p}: unsupported file type {p.suffix.lower() or '(no suffix)'!r}; "
                           f"ragbus reads {' '.join(SUFFIXES)}")


def _is_text(name: str) -> bool:
    """Whether UTF-8 can carry ``name`` (a byte of a file name that is not UTF-8 is a lone surrogate here)."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def load_documents(
    paths: list[str], collection: str = DEFAULT_COLLECTION
) -> tuple[list[DocumentSource], list[str]]:
    """The documents to ingest (not yet read) and the files skipped, each with its path and why."""
    if not paths:
        return [DocumentSource.of(d) for d in builtin_corpus(collection)], []
    documents: list[DocumentSource] = []
    skipped: list[str] = []
    for path in find_files([Path(p) for p in paths], skipped):
        if not _is_text(str(path)):  # a name that is not UTF-8 cannot be the document's id or title
            skipped.append(f"{os.fsencode(path)!r}: the file's name is not UTF-8, which its document id must be; "
                           "rename it")
            continue
        try:
            documents.append(open_document(path, collection))
        except (OSError, ValueError) as exc:
            skipped.append(str(exc) if isinstance(exc, ValueError) else f"{path}: {exc.strerror or exc}")
    return documents, skipped
