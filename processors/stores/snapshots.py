"""Where a replica of a log stands, kept in a directory of its own: ``LocalCopy`` or ``CheckpointFile``.

- ``LocalCopy``, for state held in memory (the graph): every record as read (key, body or
  tombstone, headers), each with the reader's checkpoint right after it, in an ``AppendFile``. At
  start the replica replays it, then reads the log from the last whole frame's checkpoint on; a
  frame and its checkpoint are written together, so a replica killed at any point restarts where
  its copy ends, applying nothing twice and missing nothing.
- ``CheckpointFile``, for state the replica's stores keep durable themselves (faiss, tantivy and
  the library fsync every write): only the checkpoint, replaced atomically after records were
  applied. A replica killed in between applies the records after the checkpoint again, so what
  it applies must be idempotent (a store write, a switch, a removal are).

Either takes an flock of the directory's lock file: a second replica given the same one is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import msgspec

from ragbus.bus import LogRecord

from .append_file import AppendFile


class ReplicaDirInUse(OSError):
    """Another replica (in this process or another) keeps its local copy in the same directory."""


class _Frame(msgspec.Struct, array_like=True):
    key: str
    body: bytes | None
    headers: dict[str, str]
    position: str
    checkpoint: str  # the reader's checkpoint right after this record


class LocalCopy:
    """The records a replica applied, in order, each with the checkpoint after it (one ``AppendFile``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records = 0
        self._file = AppendFile(path, _Frame)
        self._lock_fd: int | None = None

    def load(self, topic: str) -> tuple[list[LogRecord], str | None]:
        """Every whole frame's record, and the last one's checkpoint (None: no frame); a torn tail is cut.

        The copy is one replica's: a second replica given the same directory is refused here.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.path)
        records: list[LogRecord] = []
        checkpoint = None
        for frame in self._file.read_new():
            records.append(LogRecord(topic, frame.key, frame.body, frame.headers, None, frame.position))
            checkpoint = frame.checkpoint
        self._file.open_for_append()
        self.records = len(records)
        return records, checkpoint

    def append(self, record: LogRecord, checkpoint: str) -> None:
        self._file.append(_Frame(record.key, record.body, dict(record.headers), record.position, checkpoint),
                          sync=False)
        self.records += 1

    def sync(self) -> None:
        self._file.sync()

    def close(self) -> None:
        self._file.close()
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)


def _lock(path: Path) -> int:
    """An flock of ``path``'s own lock file, held while the descriptor is open: one replica per directory."""
    import fcntl  # POSIX, as the stores' own locks

    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ReplicaDirInUse(
            f"another replica keeps its snapshot of the log in {path.parent}: give each replica a data "
            f"dir of its own (RAGBUS_DATA_DIR, or the processor's data_dir)"
        ) from None
    return fd


class CheckpointFile:
    """Only where a replica stands (its stores keep what it applied): one line, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records = 0
        self._checkpoint: str | None = None
        self._written: str | None = None
        self._lock_fd: int | None = None

    def load(self, topic: str) -> tuple[list[LogRecord], str | None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.path)
        try:
            self._checkpoint = self._written = self.path.read_text().rstrip("\n")
        except FileNotFoundError:
            self._checkpoint = self._written = None
        return [], self._checkpoint

    def append(self, record: LogRecord, checkpoint: str) -> None:
        self._checkpoint = checkpoint
        self.records += 1

    def sync(self) -> None:
        if self._checkpoint is None or self._checkpoint == self._written:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w") as fh:
            fh.write(self._checkpoint + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self._written = self._checkpoint

    def close(self) -> None:
        self.sync()
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)


class Snapshot(Protocol):
    records: int

    def load(self, topic: str) -> tuple[list[LogRecord], str | None]: ...

    def append(self, record: LogRecord, checkpoint: str) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...
