"""Where a document's text comes from: a file on disk, the bytes of an upload, or a text in memory.

A source becomes a ``DocumentSource``: its id and title now, its text only while it is sent, in
blocks (a page at a time for a PDF), so a 20 MB file is never held whole, let alone several times.
The section headings met while reading are kept in ``sections``, each with the offset in the text
where its section starts.

An upload's bytes are written to a file in a private temporary folder, named as the upload is (its
suffix, else one its media type implies), and read by the same converters as a file on disk: the
libraries behind them (pypdf, python-docx, charset-normalizer) read paths, and one way in means an
upload is read exactly as ``ragbus ingest`` reads the same file. Its text is taken whole before the
folder goes (an upload is bounded by the gateway's body limit), so nothing outlives the call.
With ``[convert] on_bus``, a PDF or an image is read by document-convert instead (``OnBus``, ``remote.py``).
"""

from __future__ import annotations

import hashlib
import mimetypes
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ragbus.config.settings import ConvertSettings
from ragbus.schema import Document

from .convert import PAGED_SUFFIXES, Heading, Page, Piece, convert
from .errors import UnreadableDocument, UnsupportedFormat

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
class OnBus:
    """A file for document-convert to read: on disk (``path``) or an upload's bytes (``data``)."""

    name: str  # its name as the caller knows it: the suffix picks the converter, errors say it
    settings: ConvertSettings
    path: Path | None = None
    data: bytes | None = None
    title: str = ""  # the caller's title; "" = the document's own, else ``fallback``
    fallback: str = ""

    def chunks(self, size: int) -> Iterator[bytes]:
        """The file's bytes, ``size`` at a time (at least one, maybe empty, part)."""
        if self.data is not None:
            for start in range(0, max(len(self.data), 1), size):
                yield self.data[start:start + size]
            return
        assert self.path is not None
        with open(self.path, "rb") as f:
            block = f.read(size)
            yield block
            while block := f.read(size):
                yield block

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else (self.path.stat().st_size if self.path else 0)


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
    # Told of each page as ``read`` starts it (PDFs and images: a page read by OCR takes seconds).
    on_page: list[Callable[[Page], None]] = field(default_factory=list, compare=False)
    # "sha256:<hex>" of the file's bytes (of title and text for a document from memory): the same
    # hash as the library holds means the stores hold this content already.
    content_hash: str = ""
    # A file document-convert reads (``[convert] on_bus``): ``send_document`` has it converted on the bus
    # first (``remote.py``), and sends the source that returns; ``read`` is not called on this one.
    on_bus: OnBus | None = None

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


def _texts(pieces: Iterator[Piece], sections: list[Section],
           on_page: list[Callable[[Page], None]] | None = None) -> Iterator[str]:
    """The text of a converter's pieces; each heading goes to ``sections`` at the offset it is met, each
    page start to ``on_page``'s listeners."""
    sections.clear()
    offset = 0
    for piece in pieces:
        if isinstance(piece, Heading):
            sections.append(Section(offset, piece.path))
        elif isinstance(piece, Page):
            for listener in on_page or ():
                listener(piece)
        elif piece:
            offset += len(piece)
            yield piece


def goes_on_bus(name: str | Path, settings: ConvertSettings | None) -> bool:
    """Whether ``settings`` send a file of this name to document-convert: PDFs and images, with ``on_bus``."""
    return settings is not None and settings.on_bus and Path(name).suffix.lower() in PAGED_SUFFIXES


def _not_read(name: str) -> Callable[[], Iterator[str]]:
    def read() -> Iterator[str]:
        raise RuntimeError(f"{name} is converted on the bus: send it with send_document")
    return read


def remote_file(path: Path, collection: str, settings: ConvertSettings, document_id: str) -> DocumentSource:
    """A file on disk that document-convert will read, as a ``DocumentSource`` (read by ``send_document``)."""
    if path.stat().st_size == 0:
        raise UnreadableDocument(f"{path}: empty file")
    return DocumentSource(document_id, path.stem, collection, str(path), path.stat().st_size, _not_read(str(path)),
                          content_hash=file_hash(path),
                          on_bus=OnBus(str(path), settings, path=path, fallback=path.stem))


def remote_bytes(data: bytes, name: str, *, collection: str, document_id: str, title: str, fallback: str,
                 source: str, settings: ConvertSettings) -> DocumentSource:
    """An upload's bytes that document-convert will read, as a ``DocumentSource``."""
    if not data:
        raise UnreadableDocument(f"{name}: empty file")
    return DocumentSource(document_id, title or fallback, collection, source or name, len(data), _not_read(name),
                          content_hash=f"sha256:{hashlib.sha256(data).hexdigest()}",
                          on_bus=OnBus(name, settings, data=data, title=title, fallback=fallback))


def open_document(path: Path, collection: str, settings: ConvertSettings | None = None) -> DocumentSource:
    """One file as a ``DocumentSource``; raises ``UnreadableDocument`` (or ``OSError``) saying what is wrong."""
    if goes_on_bus(path, settings):
        assert settings is not None
        return remote_file(path, collection, settings, document_id(path))
    opened = convert(path, settings)
    sections: list[Section] = []
    on_page: list[Callable[[Page], None]] = []
    return DocumentSource(
        document_id(path), opened.title or path.stem, collection, str(path), path.stat().st_size,
        lambda: _texts(opened.read(), sections, on_page), sections, on_page, file_hash(path),
    )


def upload_name(filename: str, media_type: str = "") -> str:
    """The name an upload is read under: its own (no folders), with the suffix its media type implies
    when the name has none a converter knows."""
    from .convert import SUFFIXES

    name = Path(filename.replace("\\", "/")).name.strip() or "upload"
    if Path(name).suffix.lower() in SUFFIXES:
        return name
    implied = mimetypes.guess_extension(media_type.partition(";")[0].strip().lower()) if media_type else None
    if implied in SUFFIXES:
        return name + implied
    return name


def open_bytes(data: bytes, *, filename: str = "", media_type: str = "", collection: str, document_id: str,
               title: str = "", source: str = "", settings: ConvertSettings | None = None,
               on_page: Sequence[Callable[[Page], None]] = ()) -> DocumentSource:
    """An upload as a ``DocumentSource``, its format found from ``filename``'s suffix, else ``media_type``.

    ``title`` "" takes the document's own (a PDF's or Word file's title), else the file's name.
    ``on_page``: listeners told of each page as it is converted: here, in this call (in its thread), or,
    for a file document-convert reads, by ``send_document`` as the pages stream back (the source's ``on_page``).
    Raises ``UnsupportedFormat`` or ``UnreadableDocument``, whose text names the upload, not a path here.
    """
    name = upload_name(filename, media_type)
    if goes_on_bus(name, settings):
        assert settings is not None
        remote = remote_bytes(data, name, collection=collection, document_id=document_id, title=title,
                              fallback=filename or name, source=source, settings=settings)
        remote.on_page.extend(on_page)
        return remote
    with tempfile.TemporaryDirectory(prefix="ragbus-upload-") as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            opened = convert(path, settings)
            sections: list[Section] = []
            text = "".join(_texts(opened.read(), sections, list(on_page)))
        except UnsupportedFormat as exc:
            raise UnsupportedFormat(str(exc).replace(str(path), name)) from None
        except (UnreadableDocument, OSError) as exc:
            raise UnreadableDocument(str(exc).replace(str(path), name)) from None
        except Exception as exc:  # a library failing on a page deep inside: the upload cannot be read
            raise UnreadableDocument(f"{name}: cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not text.strip():
        raise UnreadableDocument(f"{name}: no text")
    return DocumentSource(document_id, title or opened.title or filename or name, collection, source or name,
                          len(text), lambda: iter((text,)), sections,
                          content_hash=f"sha256:{hashlib.sha256(data).hexdigest()}")
