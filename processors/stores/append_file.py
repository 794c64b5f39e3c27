"""``AppendFile``: the one append-only file type of the stores, frames of msgpack, a torn tail cut.

Each frame is a 4-byte big-endian length and one msgpack-encoded value of the file's type. One
writer appends (flushed at once, fsynced per append or when asked); any number of readers read
the frames appended since their last look, and a frame still being written (a short tail, or one
that does not decode yet) waits for the next look. A writer opening the file reads it to the
end of its last whole frame and cuts what follows (a writer that died mid-append). The graph's
log, the library of a collection and a replica's local copy of a log are such files.

Written here, not by a library: the framing is three lines; what matters is that the stores
share one reading of a torn tail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

import msgspec

log = logging.getLogger(__name__)
T = TypeVar("T")

_LENGTH = struct.Struct(">I")


class AppendFile(Generic[T]):
    """Frames of ``frame_type`` in ``path``; ``offset`` is the end of the last whole frame read or written."""

    def __init__(self, path: Path, frame_type: type[T]) -> None:
        self.path = path
        self.offset = 0
        self.size = 0  # the file's size at the last look
        self._decode = msgspec.msgpack.Decoder(frame_type).decode
        self._encode = msgspec.msgpack.Encoder().encode
        self._file: BinaryIO | None = None
        self._writer = False  # open_for_append was called: the file is made by the first append
        self._dirty = False

    def read_new(self) -> Iterator[T]:
        """Each whole frame appended since the last read, in order; ``offset`` moves past each as it is
        yielded. A short or undecodable tail is left for the next read (a writer cuts it at open)."""
        try:
            self.size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if self.size <= self.offset:
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            while self.offset + _LENGTH.size <= self.size:
                (length,) = _LENGTH.unpack(fh.read(_LENGTH.size))
                if self.offset + _LENGTH.size + length > self.size:
                    return
                try:
                    value = self._decode(fh.read(length))
                except msgspec.DecodeError:
                    return  # a frame half overwritten: the file ends before it
                self.offset += _LENGTH.size + length
                yield value

    def open_for_append(self) -> None:
        """Cut whatever follows the last whole frame read (``read_new`` first), and take appends. A file
        that does not exist is made by the first append, not here: it says its store holds something."""
        size = self.path.stat().st_size if self.path.exists() else 0
        if size > self.offset:
            log.warning("%s: cut a torn tail of %d bytes", self.path, size - self.offset)
            with self.path.open("r+b") as fh:
                fh.truncate(self.offset)
                os.fsync(fh.fileno())
        self._writer = True

    def append(self, value: Any, *, sync: bool = True) -> None:
        """Append one frame, flushed; fsynced unless ``sync`` is false (then by ``sync()`` later)."""
        if self._file is None:
            if not self._writer:
                raise RuntimeError(f"{self.path} is not open for appends")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
        payload = self._encode(value)
        try:
            self._file.write(_LENGTH.pack(len(payload)) + payload)
            self._file.flush()
        except BaseException:
            self._cut_failed_append()
            raise
        self.offset += _LENGTH.size + len(payload)
        self._dirty = True
        if sync:
            self.sync()

    def _cut_failed_append(self) -> None:
        """What a refused append wrote of its frame (a full disk) is cut, so the next frame follows the last
        whole one instead of a torn one; the next append opens the file again."""
        file, self._file = self._file, None
        with contextlib.suppress(OSError):
            assert file is not None
            file.close()
        with self.path.open("r+b") as fh:
            fh.truncate(self.offset)

    def sync(self) -> None:
        if self._file is not None and self._dirty:
            os.fsync(self._file.fileno())
            self._dirty = False

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            try:
                if self._dirty:
                    os.fsync(file.fileno())
                    self._dirty = False
            finally:
                file.close()  # closed even when the disk refuses the last of it (the next writer cuts it)
