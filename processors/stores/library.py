"""The library of one collection: which documents every store holds, rebuilt from an append-only file.

``<data_dir>/<collection>/documents.log`` is an ``AppendFile`` of ``RecordDocument`` frames, each
fsynced before the writer replies; the last record of an id wins, and a ``removed`` one drops it.
Readers replay it and pick up the frames appended since (one ``stat`` per request), as the graph's
readers do, so the writer and the readers share only the file. A library written as JSON lines
(before the stores shared one file type) is rewritten as frames by the data dir's writer at its start.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from ragbus.schema import DocumentInfo, RecordDocument, check_collection
from ragbus.schema.times import iso

from .append_file import AppendFile
from .layout import collections, library_path
from .writer_lock import WriterLock, take_writer_lock

log = logging.getLogger(__name__)


class Library:
    """The documents of one collection, by id, caught up with its file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.documents: dict[str, DocumentInfo] = {}
        self._file = AppendFile(path, RecordDocument)

    @property
    def offset(self) -> int:
        """Bytes of the file applied so far."""
        return self._file.offset

    def apply(self, record: RecordDocument) -> bool:
        """Apply a record; whether it changed anything."""
        doc = record.document
        if record.removed:
            return self.documents.pop(doc.document_id, None) is not None
        self.documents[doc.document_id] = doc
        return True

    def catch_up(self) -> None:
        """Apply the records appended since the last call (a record still being written waits)."""
        for record in self._file.read_new():
            self.apply(record)

    def open_for_append(self) -> None:
        """Replay the file, then cut a torn last record (a writer that died mid-append)."""
        _frames_from_json_lines(self.path)
        self.catch_up()
        self._file.open_for_append()

    def append(self, record: RecordDocument) -> None:
        self._file.append(record)

    def close(self) -> None:
        self._file.close()

    def page(self, *, ids: list[str], prefix: str, after: str, limit: int) -> tuple[list[DocumentInfo], bool]:
        """Documents in id order: only ``ids`` (if any), ids starting with ``prefix``, after ``after``."""
        wanted = set(ids)
        chosen = sorted(
            d for d in self.documents
            if (not wanted or d in wanted) and d.startswith(prefix) and d > after
        )
        return [self.documents[d] for d in chosen[:limit]], len(chosen) > limit



class Libraries:
    """The libraries of a data dir's collections opened so far, for a writer (one per data dir, holding its
    ``documents`` writer lock from ``open``) or a reader (each read catches up with the file)."""

    def __init__(self, data_dir: Path, *, writer: bool) -> None:
        self.data_dir = data_dir
        self.writer = writer
        self.libraries: dict[str, Library] = {}
        self._lock: WriterLock | None = None

    def open(self, processor: str) -> None:
        """A writer takes the data dir's writer lock (``StoreLocked`` if another process holds it), then
        rewrites as frames every library of the data dir still in JSON lines, so readers list them at once."""
        if self.writer:
            self._lock = take_writer_lock(self.data_dir, "documents", processor=processor)
            for collection in collections(self.data_dir):
                _frames_from_json_lines(library_path(self.data_dir, collection))

    def close(self) -> None:
        libraries, self.libraries = self.libraries, {}
        for library in libraries.values():
            library.close()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()

    def get(self, collection: str) -> Library:
        library = self.libraries.get(collection)
        if library is None:
            library = self.libraries[collection] = Library(library_path(self.data_dir, collection))
            if self.writer:
                library.open_for_append()
        if not self.writer:
            library.catch_up()
        return library

    def record(self, request: RecordDocument) -> tuple[int, int]:
        """Apply a record, logged first (what a reader replays is what the writer holds); (1 if it changed
        the library, else 0; the file's length after it). A document's first record is dated here."""
        doc = request.document
        library = self.get(check_collection(doc.collection))
        if request.removed and doc.document_id not in library.documents:
            return 0, library.offset  # nothing to remove: the file stays as it is
        request = dated(request)
        library.append(request)
        library.apply(request)
        return 1, library.offset


def dated(request: RecordDocument) -> RecordDocument:
    """The record with ``ingested_at`` set to now, unless it is a removal or already dated."""
    doc = request.document
    if request.removed or doc.ingested_at is not None:
        return request
    return msgspec.structs.replace(request, document=msgspec.structs.replace(doc, ingested_at=iso(datetime.now(UTC))))


def _frames_from_json_lines(path: Path) -> None:
    """A library of JSON lines (its first byte ``{``, which no frame's length starts with) rewritten as
    frames, atomically; a torn last line is dropped, as its writer would have cut it."""
    try:
        with path.open("rb") as fh:
            if fh.read(1) != b"{":
                return
            data = b"{" + fh.read()
    except FileNotFoundError:
        return
    lines = data[: data.rfind(b"\n") + 1].splitlines()
    records = [msgspec.json.decode(line, type=RecordDocument) for line in lines if line.strip()]
    tmp = path.with_name(path.name + ".frames")
    tmp.unlink(missing_ok=True)
    frames = AppendFile(tmp, RecordDocument)
    frames.open_for_append()
    for record in records:
        frames.append(record, sync=False)
    frames.close()
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)
    log.info("%s: %d records rewritten from JSON lines as frames", path, len(records))
