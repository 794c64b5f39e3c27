"""A replica's state made from a log topic: restored from its snapshot, caught up with the log, then followed.

Every replica that makes its stores from the log (``Bus.read_log``) keeps, in a directory of
its own, a snapshot of where it stands, of one of two kinds:

- ``LocalCopy``, for state held in memory (the graph): a file of length-prefixed msgpack
  frames, each a record as read (key, body or tombstone, headers) with the reader's checkpoint
  right after it. At start the replica replays it, then reads the log from the last whole
  frame's checkpoint on. A frame and its checkpoint are written together, so a replica killed
  at any point restarts where its copy ends, applying nothing twice and missing nothing; a torn
  last frame (killed mid-write) is cut off.
- ``CheckpointFile``, for state the replica's stores keep durable themselves (faiss, tantivy
  and the library fsync every write): only the checkpoint, replaced atomically after records
  were applied. A replica killed in between applies the records after the checkpoint again,
  so ``apply`` must be idempotent for such state (a store write, a switch, a removal are).

What is written is flushed at once and fsynced at most every ``sync_interval_s`` (and when
caught up or closing): what a crash of the machine loses is read again from the log.

``start`` returns once the replica has applied every record appended before it began
(``LogReader.caught_up``), so a processor that starts its follower in ``start`` reports ready
only then; afterwards the follower applies each record as it arrives. ``wait_for`` lets a
writer (or a read that must see a write) wait until a position is applied.

A replica whose stores rewrite files per change can pass ``batch`` (two coroutine functions,
begin and end): while catching up, records are applied between a begin and an end, the end
publishing them all at once, at least ``batch_s`` apart (and at least twice as long as the last
end took, so publishing stays a third of the time at most); a record counts as applied, and its
checkpoint is written, only after its batch ended. Once caught up, each record is applied alone.

``apply`` is the replica's own logic, a coroutine function awaited once per record, in log
order; it must be deterministic, since every replica applies the same records. A record it
refuses (it raises) is logged with its position and skipped, on every replica alike; it stays
in a local copy, so a replay skips it the same way.
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
from typing import Any, BinaryIO, Protocol, TypeVar

import msgspec

from ragbus.bus import Bus, LogReader, LogRecord
from ragbus.runtime.processor import Unavailable
from ragbus.runtime.threads import OneThread
from ragbus.schema import BadRequest, encode
from ragbus.schema.changelog import FILE_WRITES, KIND, parse_token

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

    def load(self, topic: str) -> tuple[list[LogRecord], str | None]:
        """Every whole frame's record, and the last one's checkpoint (None: no frame); a torn tail is cut.

        The copy is one replica's: a second replica given the same directory is refused here.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        records: list[LogRecord] = []
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
                records.append(LogRecord(topic, frame.key, frame.body, frame.headers, None, frame.position))
                checkpoint, good = frame.checkpoint, end
            if good < len(data):
                log.warning("%s: cut a torn tail of %d bytes after %d records",
                            self.path, len(data) - good, len(records))
                with self.path.open("r+b") as fh:
                    fh.truncate(good)
        self.records = len(records)
        self._file = self.path.open("ab")
        return records, checkpoint

    def _lock(self) -> None:
        self._lock_fd = _lock(self.path)

    def append(self, record: LogRecord, checkpoint: str) -> None:
        assert self._file is not None, "load() opens the copy"
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


class LogFollower:
    """Keeps a replica's state made from ``topic``: see the module's docstring."""

    def __init__(
        self,
        bus: Bus,
        topic: str,
        snapshot: Snapshot,
        apply: Callable[[LogRecord], Awaitable[Any]],
        *,
        name: str = "log",
        sync_interval_s: float = 1.0,
        on_progress: Callable[[int], None] | None = None,
        batch: tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]] | None = None,
        batch_s: float = 5.0,
    ) -> None:
        self.bus = bus
        self.topic = topic
        self.snapshot = snapshot
        self._apply = apply
        self._io = OneThread(f"{name}-snapshot")  # the snapshot's file work, off the loop
        self._sync_interval_s = sync_interval_s
        self._on_progress = on_progress
        self._reader: LogReader | None = None
        self._applying: str | None = None  # the position of the record being applied
        self._batch, self._batch_s = batch, batch_s
        self._unflushed: set[str] = set()  # positions applied in a batch that has not ended
        self._follower: asyncio.Task | None = None
        self._applied = asyncio.Event()  # set after each record applied; waiters clear it
        self._synced_at = time.monotonic()
        self.replayed = 0  # records replayed from a local copy at start
        self.read = 0  # records read from the log since start

    async def start(self) -> None:
        """Restore the snapshot, then apply what the log holds beyond it; returns once caught up."""
        records, checkpoint = await self._io.run(self.snapshot.load, self.topic)
        for record in records:
            await self._apply_logged(record)
        self.replayed = len(records)
        self._reader = reader = await self.bus.read_log(self.topic, after=checkpoint)
        if self._batch is None:
            while not await reader.caught_up():
                await self._step(reader)
        else:
            await self._catch_up_in_batches(reader, *self._batch)
        await self._io.run(self.snapshot.sync)
        self._synced_at = time.monotonic()
        self._follower = asyncio.ensure_future(self._follow(reader))

    async def _apply_logged(self, record: LogRecord) -> None:
        try:
            await self._apply(record)
        except Exception as exc:
            log.error("log %s: record %s (key %r) refused and skipped: %r", record.topic, record.position,
                      record.key, exc)

    async def _catch_up_in_batches(self, reader: LogReader, begin: Callable[[], Awaitable[Any]],
                                   end: Callable[[], Awaitable[Any]]) -> None:
        ended_in = 0.0
        while not await reader.caught_up():
            await begin()
            held: list[tuple[LogRecord, str]] = []
            until = time.monotonic() + max(self._batch_s, 2 * ended_in)
            try:
                while time.monotonic() < until and not await reader.caught_up():
                    held.append(await self._step(reader, held=True))
            finally:
                started = time.monotonic()
                await end()  # what was applied is published: a failed batch is read again after a restart
                ended_in = time.monotonic() - started
            for record, checkpoint in held:
                await self._io.run(self.snapshot.append, record, checkpoint)
            self._unflushed.clear()
            await self._io.run(self.snapshot.sync)
            self._synced_at = time.monotonic()
            self._applied.set()
            log.info("log %s: %d records applied in a batch (published in %.2f s)", self.topic, len(held), ended_in)

    async def _step(self, reader: LogReader, *, held: bool = False) -> tuple[LogRecord, str]:
        record = await reader.next()
        checkpoint = reader.checkpoint()
        self._applying = record.position  # returned by the reader, not applied yet
        try:
            await self._apply_logged(record)
        finally:
            self._applying = None
        if held:
            self._unflushed.add(record.position)
            self.read += 1
            if self._on_progress is not None:
                self._on_progress(self.read)
            return record, checkpoint
        # Shielded: a close while the copy is written lets the write finish (it runs before the copy
        # closes), so a record applied here is in the copy and not read from the log again at restart.
        await asyncio.shield(self._io.run(self.snapshot.append, record, checkpoint))
        if time.monotonic() - self._synced_at >= self._sync_interval_s:
            await self._io.run(self.snapshot.sync)
            self._synced_at = time.monotonic()
        self.read += 1
        self._applied.set()
        if self._on_progress is not None:
            self._on_progress(self.read)
        return record, checkpoint

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
        """Whether the record at ``position`` has been applied (records are applied one at a time, in
        the order the reader returns them: every one returned is applied but the one being applied)."""
        return (self._reader is not None and self._reader.covers(position) and position != self._applying
                and position not in self._unflushed)

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
        return self._reader is not None and await self._reader.caught_up() and not self._unflushed

    async def behind(self) -> int | None:
        """Records of the log not applied here yet (read but in a batch not yet ended included); None
        where the backend cannot count them, or before the reader opened."""
        if self._reader is None:
            return None
        beyond = await self._reader.behind()
        return None if beyond is None else beyond + len(self._unflushed) + (self._applying is not None)

    @property
    def applied(self) -> int:
        return self.replayed + self.read - len(self._unflushed)

    def checkpoint(self) -> str | None:
        return None if self._reader is None else self._reader.checkpoint()

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._follower
            self._follower = None
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await reader.close()
        try:
            await self._io.run(self.snapshot.close)
        finally:
            await self._io.close()


async def append_change(bus: Bus, topic: str, kind: str, message: msgspec.Struct, *, key: str,
                        order_key: str) -> str:
    """Append one store write to a log topic as a record of ``kind`` (``schema/changelog.py``); its position."""
    return await bus.append(topic, encode(message), key=key, order_key=order_key, headers={KIND: kind})


class NotYetApplied(Unavailable):
    """A write a request must see is not applied on this replica within its bound (its error type names it)."""


# The followers of this process by (log topic, data dir): what a query processor waits on for a request's
# ``must_see`` (documents-replica registers for the data dir it writes, kg-query for its own graphs).
_FOLLOWING: dict[tuple[str, Path], list[LogFollower]] = {}


def _dir(data_dir: Path) -> Path:
    return Path(os.path.abspath(data_dir))  # as named, without asking the file system


def register(follower: LogFollower, data_dir: Path) -> None:
    _FOLLOWING.setdefault((follower.topic, _dir(data_dir)), []).append(follower)


def unregister(follower: LogFollower, data_dir: Path) -> None:
    followers = _FOLLOWING.get((follower.topic, _dir(data_dir)), [])
    if follower in followers:
        followers.remove(follower)


class ReplicaMissing(Unavailable):
    """A read must see a write of a log, and this process, which says its stores come from it, follows none.

    Not retriable: the process's settings are wrong (no replica runs beside its readers), not late."""

    retriable = False


async def wait_seen(tokens: list[str], data_dir: Path, topic: str, timeout_s: float, *, from_log: bool) -> bool:
    """Wait until this process's followers for ``data_dir`` have applied the tokens they follow; whether
    there was one to wait for.

    ``topic`` is the caller's own log, and ``from_log`` whether its stores come from it (its
    ``changelog`` setting): then a token of it needs a follower here (else ``ReplicaMissing``, saying
    how replicas are laid out). A store of a shared data dir has no log to wait for: given the token
    of a write to files (``FILE_WRITES``) it is told to reload them now (True), since the write was
    on disk before it was answered; without one it sees a write within its ``refresh_interval_s``.
    A token of another log is waited for where this process follows that log for ``data_dir`` too.
    ``BadRequest`` for a token that is not one; ``NotYetApplied`` past ``timeout_s``.
    """
    waits: list[tuple[LogFollower, str, str]] = []
    reload = False
    for value in tokens:
        try:
            log_topic, position = parse_token(value)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if log_topic == FILE_WRITES:
            reload = reload or not from_log
            continue
        followers = _FOLLOWING.get((log_topic, _dir(data_dir)))
        if followers:
            waits.append((followers[0], log_topic, position))
        elif log_topic == topic and from_log:
            raise ReplicaMissing(
                f"must_see names {topic}, but no replica of it writes {data_dir} in this process: run "
                f"documents-replica in the same worker as the query processors (pipelines.LOG_REPLICA)"
            )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for follower, log_topic, position in waits:
        if not await follower.wait_for(position, max(0.0, deadline - loop.time())):
            raise NotYetApplied(f"{log_topic}@{position} is not applied on this replica within {timeout_s} s: "
                                f"it is behind the log (see its status)")
    return bool(waits) or reload
