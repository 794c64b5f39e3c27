"""The library of one collection: which documents every store holds, rebuilt from an append-only log.

``<data_dir>/<collection>/documents.log`` holds one JSON line per ``RecordDocument``, fsynced
before the writer replies; the last record of an id wins, and a ``removed`` one drops it.
Readers replay it and pick up complete lines appended since (one ``stat`` per request), as
the graph's readers do, so the writer and the readers share only the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ragbus.schema import DocumentInfo, RecordDocument, check_collection

LOG_NAME = "documents.log"
_decode = msgspec.json.Decoder(RecordDocument).decode


def library_path(data_dir: Path, collection: str) -> Path:
    return data_dir / check_collection(collection) / LOG_NAME


class Library:
    """The documents of one collection, by id, caught up with its log."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.documents: dict[str, DocumentInfo] = {}
        self.offset = 0

    def apply(self, record: RecordDocument) -> bool:
        """Apply a record; whether it changed anything."""
        doc = record.document
        if record.removed:
            return self.documents.pop(doc.document_id, None) is not None
        self.documents[doc.document_id] = doc
        return True

    def catch_up(self) -> None:
        """Apply the complete lines appended since the last call (a line still being written waits)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size <= self.offset:
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read(size - self.offset)
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            if line.strip():
                self.apply(_decode(line))
        self.offset += end

    def open_for_append(self) -> None:
        """Replay the log, then cut a torn last line (a writer that died mid-append)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.catch_up()
        if self.path.exists() and self.path.stat().st_size > self.offset:
            with self.path.open("r+b") as fh:
                fh.truncate(self.offset)

    def append(self, record: RecordDocument) -> None:
        line = msgspec.json.encode(record) + b"\n"
        with self.path.open("ab") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.offset += len(line)

    def page(self, *, ids: list[str], prefix: str, after: str, limit: int) -> tuple[list[DocumentInfo], bool]:
        """Documents in id order: only ``ids`` (if any), ids starting with ``prefix``, after ``after``."""
        wanted = set(ids)
        chosen = sorted(
            d for d in self.documents
            if (not wanted or d in wanted) and d.startswith(prefix) and d > after
        )
        return [self.documents[d] for d in chosen[:limit]], len(chosen) > limit


def collections(data_dir: Path) -> list[str]:
    """Every collection of a data directory: one with documents or a graph."""
    if not data_dir.is_dir():
        return []
    return sorted(
        p.name for p in data_dir.iterdir()
        if p.is_dir() and not p.name.startswith(".") and ((p / LOG_NAME).exists() or (p / "graph" / "log").exists())
    )
