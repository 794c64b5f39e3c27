"""``ShardedReplicas``: a query host's shards of the document stores, owned through the broker.

The host joins the shard owners' group (``Bus.join_assignment`` on ``owners_topic``, one
partition per shard) with ``shard_assignment.assign_shards`` as its policy. For each shard it is
given to own or to keep as a standby it runs a ``DocumentsReplica`` of that shard's partitions of
the log alone, in ``<data_dir>/shard-<k>``; once that replica has caught up, a shard it owns is
served (``serve(k, dir)``, the caller's: the host's query processors on the shard's topics), and
one it no longer owns stops being served once its new owner serves it (the new owner's report on
``REPLICAS_LOG`` says so; at most ``handover_s``), so a shard moving to a host that must catch up
first is never dark. A replica of a shard it neither owns nor stands by stops; its dir stays, so
taking the shard again reads only what it missed. The story: docs/stores-from-the-log.md, "Sharding".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ragbus.bus import Bus, Membership, Unsupported
from ragbus.schema.errors import RagbusError
from ragbus.schema import decode
from ragbus.schema.changelog import ReplicaReport
from ragbus.schema.shards import shard_partitions
from ragbus.schema.topics import REPLICAS_LOG

from .documents_replica import DocumentsReplica
from .layout import shard_dir
from .replica_settings import ReplicaSettings
from .shard_assignment import HostAssignment, HostMetadata, assign_shards

log = logging.getLogger(__name__)
OWNERS_PREFIX = "ragbus.shard-owners."


class ShardingUnsupported(RagbusError, ValueError):
    """The bus cannot hold shards: its log topics have no partitions a group can own (Pulsar)."""

    retriable = False


def owners_topic(log_topic: str) -> str:
    """The topic (and group) through which the shards of ``log_topic`` are owned: one partition per shard."""
    return OWNERS_PREFIX + log_topic.rsplit(".", 1)[-1]


@dataclass(slots=True)
class _Shard:
    replica: DocumentsReplica
    started: asyncio.Task  # the replica's start: done once caught up
    serving: bool = False
    handover: asyncio.Task | None = None  # served still, until the shard's new owner serves it
    handed_over: bool = False


@dataclass(slots=True)
class ShardState:
    """One shard as this host sees it, for status."""

    shard: int
    owner: str  # host id, "" when unknown
    here: str  # "serving", "standby", "catching up", "" (not on this host)


class ShardedReplicas:
    """See the module docstring. ``serve(k, dir)`` starts serving shard k and returns once it does;
    ``unserve(k)`` stops it; ``on_gone`` is a shard's data dir removed under it."""

    def __init__(self, name: str, data_dir: Path, log_topic: str, settings: ReplicaSettings, *, shards: int,
                 standbys: int, host_id: str, serve: Callable[[int, Path], Awaitable[Any]],
                 unserve: Callable[[int], Awaitable[Any]], on_gone: Callable[[BaseException], Any],
                 handover_s: float = 300.0) -> None:
        if shards < 1:
            raise ValueError(f"{name}: a sharded host needs shards >= 1, got {shards}")
        self.name, self.data_dir, self.log_topic, self.settings = name, data_dir, log_topic, settings
        self.shards, self.standbys = shards, standbys
        self.host_id = host_id or socket.gethostname()
        self._serve, self._unserve, self._on_gone = serve, unserve, on_gone
        self._bus: Bus | None = None
        self._membership: Membership | None = None
        self._running: dict[int, _Shard] = {}
        self._owned: frozenset[int] = frozenset()
        self._standby: frozenset[int] = frozenset()
        self.owners: dict[int, str] = {}
        self._changed = asyncio.Event()
        self._settled = asyncio.Event()  # the latest assignment's owned shards are served
        self._reconciler: asyncio.Task | None = None
        self._partitions = 0
        self.handover_s = handover_s
        self._served_by: dict[int, set[str]] = {}  # hosts whose latest report says they serve a shard
        self._reports_changed = asyncio.Condition()  # notified at each report read: hand-overs wait on it
        self._watch: asyncio.Task | None = None

    async def start(self, bus: Bus, timeout: float = 600.0) -> None:
        """Join the owners' group; return once this host serves the shards it was first given."""
        self._bus = bus
        try:
            self._partitions = await bus.log_partitions(self.log_topic)
        except Unsupported as exc:
            raise ShardingUnsupported(f"{self.name}: [stores] shards needs a bus whose log topics have partitions "
                                      f"that a group can own (Kafka, or memory:// within one process): {exc}") from None
        shard_partitions(0, self.shards, self._partitions)  # a log that cannot be split so is refused here
        self._reconciler = asyncio.ensure_future(self._reconcile())
        self._watch = asyncio.ensure_future(self._watch_reports(bus))
        topic = owners_topic(self.log_topic)
        try:
            self._membership = await bus.join_assignment(topic, topic, self.shards, metadata=self._metadata,
                                                         assign=assign_shards, on_assigned=self._assigned)
        except Unsupported as exc:
            raise ShardingUnsupported(f"{self.name}: [stores] shards needs a bus on which hosts own shards through "
                                      f"a group (Kafka, or memory:// within one process): {exc}") from None
        await self.settled(timeout)

    async def settled(self, timeout: float) -> None:
        """Wait until the shards of the latest assignment are served here (``TimeoutError`` past ``timeout``)."""
        reconciler = self._reconciler
        if reconciler is None:
            raise RuntimeError(f"{self.name} is not started")
        async with asyncio.timeout(timeout):
            while not self._settled.is_set():
                if reconciler.done():
                    reconciler.result()  # it failed: say why
                waiting = asyncio.ensure_future(self._settled.wait())
                await asyncio.wait([waiting, reconciler], return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()

    def _metadata(self) -> bytes:
        ready = sorted(k for k, s in self._running.items()
                       if s.started.done() and not s.started.cancelled() and s.started.exception() is None)
        return msgspec.json.encode(HostMetadata(self.host_id, ready, self.standbys))

    async def _assigned(self, owned: frozenset[int], data: bytes) -> None:
        told = msgspec.json.decode(data, type=HostAssignment) if data else HostAssignment()
        self._owned, self._standby = owned, frozenset(told.standby)
        self.owners = dict(told.owners)
        log.info("%s: owns shards %s, standby for %s", self.name, sorted(owned), sorted(self._standby))
        self._settled.clear()
        self._changed.set()

    async def _reconcile(self) -> None:
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                await self._follow_assignment()
        except Exception as exc:  # a shard that cannot start, a serve that fails: the host is not what it says
            self._on_gone(exc)
            raise

    async def _follow_assignment(self) -> None:
        owned, keep = self._owned, self._owned | self._standby
        for k, shard in sorted(self._running.items()):
            if k in owned and shard.handover is not None:  # given back before it was handed over
                shard.handover.cancel()
                shard.handover, shard.handed_over = None, False
            if shard.serving and k not in owned:
                owner = self.owners.get(k, "")
                if not shard.handed_over and owner and owner != self.host_id:
                    if shard.handover is None:
                        shard.handover = asyncio.ensure_future(self._hand_over(k, owner))
                    continue  # served here until its new owner serves it
                shard.serving = False
                await self._unserve(k)
                await self._report(shard)
            if k not in keep and not shard.serving:
                await self._stop(k)
        for k in sorted(keep - set(self._running)):
            self._running[k] = self._start(k)
        for k, shard in sorted(self._running.items()):  # each owned shard served once its replica caught up
            if k not in owned or shard.serving:
                continue
            if not shard.started.done():
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait([shard.started, changed], return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if self._changed.is_set():
                    return  # a newer assignment came meanwhile: follow that one
            shard.started.result()
            await self._serve(k, shard.replica.data_dir)
            shard.serving, shard.handed_over = True, False
            await self._report(shard)  # at once: a host handing this shard over waits for this report
        self._settled.set()

    async def _report(self, shard: _Shard) -> None:
        reports = shard.replica.reports
        if reports is not None:
            with contextlib.suppress(Exception):  # the next periodic report says it again
                await reports.report()

    async def _hand_over(self, k: int, to: str) -> None:
        """Wait until host ``to`` reports serving shard ``k`` (at most ``handover_s``), then let it go."""
        try:
            async with asyncio.timeout(self.handover_s), self._reports_changed:
                await self._reports_changed.wait_for(lambda: to in self._served_by.get(k, set()))
            log.info("%s: shard %d is served by %s: no longer served here", self.name, k, to)
        except TimeoutError:
            log.warning("%s: shard %d's new owner %s does not serve it after %.0f s: it stops being served here",
                        self.name, k, to, self.handover_s)
        shard = self._running.get(k)
        if shard is not None:
            shard.handed_over, shard.handover = True, None
            self._changed.set()

    async def _watch_reports(self, bus: Bus) -> None:
        """Which hosts serve each shard of this log, as their replicas' latest reports say."""
        latest: dict[str, ReplicaReport] = {}
        while True:
            try:
                async with await bus.read_log(REPLICAS_LOG) as reader:
                    while True:
                        record = await reader.next()
                        report = None if record.body is None else decode(record.body, ReplicaReport)
                        if report is None or report.shard is None or report.log_topic != self.log_topic:
                            latest.pop(record.key, None)
                        else:
                            latest[record.key] = report
                        served: dict[int, set[str]] = {}
                        for r in latest.values():
                            if r.serving and r.shard is not None:
                                served.setdefault(r.shard, set()).add(r.host)
                        async with self._reports_changed:
                            self._served_by = served
                            self._reports_changed.notify_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker away a while: read the reports again from the start
                log.warning("%s: reading %s failed, again in 1 s: %r", self.name, REPLICAS_LOG, exc)
                latest.clear()
                await asyncio.sleep(1.0)

    def _start(self, k: int) -> _Shard:
        replica = DocumentsReplica(
            f"{self.name}.shard-{k}", shard_dir(self.data_dir, k), self.log_topic, self.settings, self._on_gone,
            partitions=shard_partitions(k, self.shards, self._partitions), shard=k,
            serving=lambda: self._running.get(k) is not None and self._running[k].serving,
            shards=self.shards, host=self.host_id,
        )
        assert self._bus is not None
        return _Shard(replica, asyncio.ensure_future(replica.start(self._bus)))

    async def _stop(self, k: int) -> None:
        shard = self._running.pop(k)
        if shard.handover is not None:
            shard.handover.cancel()
        if shard.serving:
            await self._unserve(k)
        shard.started.cancel()
        with contextlib.suppress(BaseException):
            await shard.started
        await shard.replica.close()

    def states(self) -> list[ShardState]:
        """Every shard as this host sees it."""
        out = []
        for k in range(self.shards):
            shard = self._running.get(k)
            here = "" if shard is None else "serving" if shard.serving else (
                "catching up" if not shard.started.done() else "standby")
            out.append(ShardState(k, self.owners.get(k, ""), here))
        return out

    async def close(self) -> None:
        if self._membership is not None:
            membership, self._membership = self._membership, None
            await membership.close()  # the group hands this host's shards to the others at once
        for task in (self._reconciler, self._watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        for k in sorted(self._running):
            await self._stop(k)
