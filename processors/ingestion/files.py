"""Documents from files and folders, and the built-in corpus: what ``ragbus ingest`` reads.

With no path, the corpus is the Python language reference that ships with
every Python (``pydoc_data.topics``: 79 topics), so a fresh machine has
something to ask about. Each file is read by ``sources.open_document`` (PDF, Word,
PowerPoint, web pages, Markdown, text); folders are walked here (hidden files and
folders left out). A file that cannot be
read, is empty, corrupt or of a type no converter reads is reported with its
path and why, and the others go on.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

from ragbus.config.settings import ConvertSettings
from ragbus.schema import DEFAULT_COLLECTION, Document

from .convert import SUFFIXES
from .sources import BUILTIN_PREFIX, DocumentSource, document_id, open_document

def builtin_corpus(collection: str) -> list[Document]:
    import pydoc_data.topics

    return [
        Document(document_id=document_id(BUILTIN_PREFIX + name), text=text, title=name, collection=collection,
                 source="pydoc_data.topics")
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
    paths: list[str], collection: str = DEFAULT_COLLECTION, settings: ConvertSettings | None = None
) -> tuple[list[DocumentSource], list[str]]:
    """The documents to ingest (not yet read) and the files skipped, each with its path and why.
    ``settings``: how pages without text and images are read (``[convert]``)."""
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
            documents.append(open_document(path, collection, settings))
        except (OSError, ValueError) as exc:
            skipped.append(str(exc) if isinstance(exc, ValueError) else f"{path}: {exc.strerror or exc}")
    return documents, skipped
