"""The library of one collection: which documents every store holds, rebuilt from an append-only file.

``<data_dir>/<collection>/documents.log`` is an ``AppendFile`` of ``RecordDocument`` frames, each
fsynced before the writer replies; the last record of an id wins, and a ``removed`` one drops it.
Readers replay it and pick up the frames appended since (one ``stat`` per request), as the graph's
readers do, so the writer and the readers share only the file. A library written as JSON lines
(before the stores shared one file type) is rewritten as frames by its writer when it opens it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

from ragbus.schema import DocumentInfo, RecordDocument

from .append_file import AppendFile

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
