"""Each replica of a log says how far it has applied it, on the bus; ``ragbus status`` reads what they said
(``processors/runtime/pipeline_status.py``).

A replica (documents-replica, kg-query with its graphs from the log) appends a ``ReplicaReport``
to ``REPLICAS_LOG`` every ``interval_s`` while it runs (from its start, so a catch-up shows its
progress), keyed by ``<processor>@<host>:<data dir>`` (``<host>``: the machine's host name, or a shard
host's host id for its shards' replicas): compaction keeps each replica's latest
report, and a replica that stops appends a tombstone. A report says the records applied, how
many the log holds beyond them (where the backend can count: Kafka and memory; Pulsar says only
whether it has caught up), and when it was made, so a replica killed without a word shows as a
report that grows old.

Written here, not by a library: it is a record on ragbus's own log topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

from ragbus.bus import LogTopics
from ragbus.stores.follower import LogFollower
from ragbus.schema import encode
from ragbus.schema.changelog import ReplicaReport
from ragbus.schema.topics import REPLICAS_LOG

log = logging.getLogger(__name__)


def replica_id(processor: str, data_dir: Path, host: str = "") -> str:
    """``<processor>@<host>:<data dir>``; ``host`` "" is the machine's host name."""
    return f"{processor}@{host or socket.gethostname()}:{data_dir}"


class ReportLoop:
    """Appends the follower's report every ``interval_s`` from ``start`` until ``close`` (then a tombstone)."""

    def __init__(self, bus: LogTopics, follower: LogFollower, replica: str, *, interval_s: float = 5.0,
                 shard: int | None = None, serving: Callable[[], bool] | None = None,
                 shards: int | None = None, host: str = "") -> None:
        self.bus, self.follower, self.replica, self.interval_s = bus, follower, replica, interval_s
        # A shard's replica: which shard of how many, whether its host serves it, and the host's id among the
        # shards' owners.
        self.shard, self._serving, self.shards, self.host = shard, serving, shards, host
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def report(self) -> ReplicaReport:
        f = self.follower
        report = ReplicaReport(replica=self.replica, log_topic=f.topic, applied=f.applied, behind=await f.behind(),
                               caught_up=await f.caught_up(), checkpoint=f.checkpoint() or "",
                               reported_at=time.time(), shard=self.shard,
                               serving=None if self._serving is None else self._serving(), shards=self.shards,
                               host=self.host)
        await self.bus.append(REPLICAS_LOG, encode(report), key=self.replica)
        return report

    async def _loop(self) -> None:
        while True:
            try:
                await self.report()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker is away for a while: the next report says it again
                # An unreachable broker is said by the bus, once and then now and then (processors/bus/outage.py).
                level = logging.WARNING if self.bus.unreachable() is None else logging.DEBUG
                log.log(level, "%s: report to %s failed: %r", self.replica, REPLICAS_LOG, exc)
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        if self._task is None:
            return
        task, self._task = self._task, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        with contextlib.suppress(Exception):  # a replica that stops is no longer one: its report goes
            await self.bus.append(REPLICAS_LOG, None, key=self.replica)
