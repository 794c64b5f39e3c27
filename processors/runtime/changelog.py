"""A replica's state made from a log topic: replayed from its own copy, caught up with the log, then followed.

Every replica that makes its stores from the log (``Bus.read_log``) keeps a local copy of
what it applied, in a directory of its own: a file of length-prefixed msgpack frames, each a
record as read (key, body or tombstone, headers) with the reader's checkpoint right after it.
The copy is its snapshot: at start the replica replays it, then reads the log from the last
whole frame's checkpoint on. A frame and its checkpoint are written together, so a replica
killed at any point restarts where its copy ends, applying nothing twice and missing nothing;
a torn last frame (killed mid-write) is cut off. Frames are flushed as written and fsynced at
most every ``sync_interval_s`` (and when caught up or closing): what a crash of the machine
loses is read again from the log.

``start`` returns once the replica has applied every record appended before it began
(``LogReader.caught_up``), so a processor that starts its follower in ``start`` reports ready
only then; afterwards the follower applies each record as it arrives. ``wait_for`` lets a
writer (or a read that must see a write) wait until a position is applied.

``apply`` is the replica's own logic: it runs on the caller's store thread (``run``), once per
record, in log order, and must be deterministic, since every replica applies the same records.
A record ``apply`` refuses (it raises) is logged with its position and skipped, on every
replica alike; it stays in the copy, so a replay skips it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import msgspec

from processors.bus import Bus, LogReader, LogRecord

log = logging.getLogger(__name__)
T = TypeVar("T")

_LENGTH = struct.Struct(">I")


class ReplicaDirInUse(OSError):
    """Another replica (in this process or another) keeps its local copy in the same directory."""


class _Frame(msgspec.Struct, array_like=True):
    key: str
    body: bytes | None
    headers: dict[str, str]
    position: str
    checkpoint: str  # the reader's checkpoint right after this record


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(_Frame).decode


class LocalCopy:
    """The records a replica applied, in order, each with the checkpoint after it (one file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records = 0
        self._file: BinaryIO | None = None
        self._lock_fd: int | None = None
        self._dirty = False

    def replay(self, apply: Callable[[LogRecord], Any], topic: str) -> str | None:
        """Apply every whole frame; cut a torn tail; return the last frame's checkpoint (None: no frame).

        The copy is one replica's: a second replica given the same directory is refused here.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        checkpoint, good = None, 0
        if self.path.exists():
            with self.path.open("rb") as fh:
                data = fh.read()
            while good + _LENGTH.size <= len(data):
                (length,) = _LENGTH.unpack_from(data, good)
                end = good + _LENGTH.size + length
                if end > len(data):
                    break
                try:
                    frame = _decode(data[good + _LENGTH.size:end])
                except msgspec.DecodeError:
                    break  # a frame half overwritten: the copy ends before it
                _apply_logged(apply, LogRecord(topic, frame.key, frame.body, frame.headers, None, frame.position))
                checkpoint, good = frame.checkpoint, end
                self.records += 1
            if good < len(data):
                log.warning("%s: cut a torn tail of %d bytes after %d records",
                            self.path, len(data) - good, self.records)
                with self.path.open("r+b") as fh:
                    fh.truncate(good)
        self._file = self.path.open("ab")
        return checkpoint

    def _lock(self) -> None:
        import fcntl  # POSIX, as the stores' own locks

        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ReplicaDirInUse(
                f"another replica keeps its copy of the log in {self.path.parent}: give each replica a data "
                f"dir of its own (RAGBUS_DATA_DIR, or the processor's data_dir)"
            ) from None
        self._lock_fd = fd

    def append(self, record: LogRecord, checkpoint: str) -> None:
        assert self._file is not None, "replay() opens the copy"
        payload = _encode(_Frame(record.key, record.body, dict(record.headers), record.position, checkpoint))
        self._file.write(_LENGTH.pack(len(payload)) + payload)
        self._file.flush()
        self._dirty = True
        self.records += 1

    def sync(self) -> None:
        if self._file is not None and self._dirty:
            os.fsync(self._file.fileno())
            self._dirty = False

    def close(self) -> None:
        if self._file is not None:
            self.sync()
            self._file.close()
            self._file = None
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)


def _apply_logged(apply: Callable[[LogRecord], Any], record: LogRecord) -> None:
    try:
        apply(record)
    except Exception as exc:
        log.error("log %s: record %s (key %r) refused and skipped: %r", record.topic, record.position, record.key, exc)


class LogFollower:
    """Keeps a replica's state made from ``topic``: see the module's docstring."""

    def __init__(
        self,
        bus: Bus,
        topic: str,
        copy: Path,
        apply: Callable[[LogRecord], Any],
        run: Callable[..., Awaitable[Any]],
        *,
        sync_interval_s: float = 1.0,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.bus = bus
        self.topic = topic
        self.copy = LocalCopy(copy)
        self._apply = apply
        self._run = run
        self._sync_interval_s = sync_interval_s
        self._on_progress = on_progress
        self._reader: LogReader | None = None
        self._follower: asyncio.Task | None = None
        self._applied = asyncio.Event()  # set after each record applied; waiters clear it
        self._synced_at = time.monotonic()
        self.replayed = 0  # records replayed from the local copy at start
        self.read = 0  # records read from the log since start

    async def start(self) -> None:
        """Replay the local copy, then apply what the log holds beyond it; returns once caught up."""
        checkpoint = await self._run(self.copy.replay, self._apply, self.topic)
        self.replayed = self.copy.records
        self._reader = reader = await self.bus.read_log(self.topic, after=checkpoint)
        while not await reader.caught_up():
            await self._step(reader)
        await self._run(self.copy.sync)
        self._follower = asyncio.ensure_future(self._follow(reader))

    async def _step(self, reader: LogReader) -> None:
        record = await reader.next()
        checkpoint = reader.checkpoint()
        await self._run(self._apply_and_copy, record, checkpoint)
        self.read += 1
        self._applied.set()
        if self._on_progress is not None:
            self._on_progress(self.read)

    def _apply_and_copy(self, record: LogRecord, checkpoint: str) -> None:
        _apply_logged(self._apply, record)
        self.copy.append(record, checkpoint)
        if time.monotonic() - self._synced_at >= self._sync_interval_s:
            self.copy.sync()
            self._synced_at = time.monotonic()

    async def _follow(self, reader: LogReader) -> None:
        while True:
            try:
                await self._step(reader)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker went away for a while: the reader's client reconnects
                log.warning("log %s: reading failed, retrying in 1 s: %r", self.topic, exc)
                await asyncio.sleep(1.0)

    def covers(self, position: str) -> bool:
        """Whether the record at ``position`` has been applied."""
        return self._reader is not None and self._reader.covers(position)

    async def wait_for(self, position: str, timeout: float) -> bool:
        """Wait until the record at ``position`` is applied; False if ``timeout`` seconds pass first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.covers(position):
            left = deadline - loop.time()
            if left <= 0:
                return False
            self._applied.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._applied.wait(), left)
        return True

    async def caught_up(self) -> bool:
        return self._reader is not None and await self._reader.caught_up()

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._follower
            self._follower = None
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await reader.close()
        await self._run(self.copy.close)
