"""``LogFollower``: a replica's state made from a log topic, restored from its snapshot, caught up, then followed.

A replica that makes its stores from the log (``Bus.read_log``) keeps where it stands in a snapshot
(``snapshots.py``: a local copy of the records, or only a checkpoint). ``start`` restores the
snapshot and returns once the replica has applied every record appended before it began
(``LogReader.caught_up``), so a processor that starts its follower in ``start`` reports ready only
then; afterwards the follower applies each record as it arrives. What is written to the snapshot
is flushed at once and fsynced at most every ``sync_interval_s`` (and when caught up or closing):
what a crash of the machine loses is read again from the log. ``wait_for`` lets a writer (or a read
that must see a write) wait until a position is applied.

A replica whose stores rewrite files per change can pass ``batch`` (two coroutine functions, begin
and end): while catching up, records are applied between a begin and an end, the end publishing
them all at once, at least ``batch_s`` apart (and at least twice as long as the last end took, so
publishing stays a third of the time at most); a record counts as applied, and its checkpoint is
written, only after its batch ended. Once caught up, each record is applied alone.

``apply`` is the replica's own logic, awaited once per record, in log order; it must be
deterministic, since every replica applies the same records. A record it refuses (it raises) is
logged with its position and skipped, on every replica alike; it stays in a local copy, so a
replay skips it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from ragbus.bus import LogReader, LogRecord, LogTopics
from ragbus.bus.positions import place
from ragbus.runtime.threads import OneThread

from .snapshots import Snapshot

log = logging.getLogger(__name__)


class LogFollower:
    """Keeps a replica's state made from ``topic``: see the module's docstring."""

    def __init__(
        self,
        bus: LogTopics,
        topic: str,
        snapshot: Snapshot,
        apply: Callable[[LogRecord], Awaitable[Any]],
        *,
        name: str = "log",
        sync_interval_s: float = 1.0,
        on_progress: Callable[[int], None] | None = None,
        batch: tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]] | None = None,
        batch_s: float = 5.0,
        partitions: Collection[int] | None = None,
    ) -> None:
        self.bus = bus
        self.partitions = None if partitions is None else frozenset(partitions)  # a shard's, or all
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
        self._reader = reader = await self.bus.read_log(self.topic, after=checkpoint, partitions=self.partitions)
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
        the order the reader returns them: every one returned is applied but the one being applied).
        A follower of some partitions (a shard's) has nothing to apply of another's: True."""
        if not self.holds(position):
            return True
        return (self._reader is not None and self._reader.covers(position) and position != self._applying
                and position not in self._unflushed)

    def holds(self, position: str) -> bool:
        """Whether ``position`` is in a partition this follower reads (memory:// positions name none: all are)."""
        if self.partitions is None:
            return True
        partition = place(position)[0]
        return partition == "" or int(partition) in self.partitions

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
