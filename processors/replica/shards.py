"""shard-host: a query host's shards of the document stores, each served by its own query processors.

With ``[stores] shards = N`` a query host runs this in place of documents-replica and the document
stores' query processors: ``stores/shards.py`` owns shards through the broker and keeps a replica
of each in ``<data_dir>/shard-<k>``, and for each shard it serves, this builds the host's query
processors named in ``serve`` (their sections of the settings) on the shard's topics
(``<topic>.shard-<k>``, ``schema/shards.py``) and data dir, and runs them until the shard moves.
It answers ``ReplicaStatusRequest`` with its shards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Annotated, Any

import msgspec

from ragbus.config.settings import Settings as Deployment
from ragbus.config.settings import data_dir, processor_settings
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.runtime.worker import processor_class
from ragbus.schema.changelog import ReplicaStatusRequest, ShardStatus, ShardsStatus
from ragbus.schema.shards import shard_topic
from ragbus.schema.topics import DOCUMENTS_LOG
from ragbus.stores.replica_settings import ReplicaSettings
from ragbus.stores.shards import ShardedReplicas

log = logging.getLogger(__name__)


class ShardHostSettings(ReplicaSettings, kw_only=True, forbid_unknown_fields=True):
    # The shards of the collection: [stores] shards, unless this section says. At least 1 here.
    shards: Annotated[int, msgspec.Meta(ge=0)] = 0
    # Each shard is also followed, unserved, by this many other hosts: a standby takes its shard over by
    # serving it, without reading its log from the start. Each costs a shard's memory and disk per host.
    standbys: Annotated[int, msgspec.Meta(ge=0)] = 0
    # This host's name in the owners' group ("" = the machine's host name; a StatefulSet's pod name is stable).
    host_id: str = ""
    # The processors serving each shard: names of [processors.NAME] sections, each run on the shard's topic
    # and data dir. document-rag asks these three (processors/document_rag/shards.py).
    serve: list[str] = msgspec.field(default_factory=lambda: ["doc-embeddings-query", "fetch-chunk", "keyword-query"])
    # A shard given to another host is served here still until that host serves it (its report says so), at
    # most this long: a shard moving to a host that must catch up first is not dark meanwhile.
    handover_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    # The host is ready once it serves the shards it was first given: at most this long.
    start_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0


class ShardHostProcessor(Processor[ReplicaStatusRequest, ShardsStatus]):
    request_type = ReplicaStatusRequest
    response_type = ShardsStatus
    Settings = ShardHostSettings
    settings: ShardHostSettings
    starts_first = True  # its shards are served once caught up; the host is ready then

    def __init__(self, name: str, settings: ShardHostSettings, pipeline: Deployment | None = None) -> None:
        super().__init__(name, settings)
        if settings.shards < 1:
            raise ValueError(f"{name}: shards must be at least 1 ([stores] shards); an unsharded query host "
                             "runs documents-replica instead")
        self.pipeline = pipeline or Deployment()
        for served in settings.serve:  # a name without a section is refused now, not when a shard comes
            if "class" not in self.pipeline.processors.get(served, {}):
                raise ValueError(f"{name}: serve names {served!r}, which has no [processors.{served}] class")
        self.log_topic = settings.log_topic or DOCUMENTS_LOG
        self._serving: dict[int, tuple[asyncio.Event, list[asyncio.Task]]] = {}
        self.shards = ShardedReplicas(
            name, data_dir(settings.data_dir), self.log_topic, settings, shards=settings.shards,
            standbys=settings.standbys, host_id=settings.host_id, serve=self._serve, unserve=self._unserve,
            on_gone=self.fail, handover_s=settings.handover_s,
        )

    @classmethod
    def build(cls, name: str, settings: Any, pipeline: Deployment) -> Processor:
        return cls(name, settings, pipeline)

    async def start(self) -> None:
        await self.shards.start(self.bus, self.settings.start_timeout_s)

    async def close(self) -> None:
        await self.shards.close()

    def shard_processors(self, shard: int, where: Path) -> list[Processor]:
        """The processors serving ``shard`` from ``where``: each of ``serve`` on the shard's topic and group."""
        built = []
        for served in self.settings.serve:
            cls = processor_class(self.pipeline.processors[served]["class"])
            typed = processor_settings(self.pipeline, served, cls.Settings)
            changes: dict[str, Any] = {"topic": shard_topic(typed.topic, shard),
                                       "group": shard_topic(typed.group, shard),
                                       # a bulk lane, if one is set, is the shard's own too
                                       "bulk_topic": typed.bulk_topic and shard_topic(typed.bulk_topic, shard)}
            if "data_dir" in typed.__struct_fields__:
                changes.update(data_dir=str(where), changelog=True, log_topic=self.log_topic)
            built.append(cls(shard_topic(served, shard), msgspec.structs.replace(typed, **changes)))
        return built

    async def _serve(self, shard: int, where: Path) -> None:
        stop = asyncio.Event()
        processors = self.shard_processors(shard, where)
        joined = [asyncio.Event() for _ in processors]
        runs = [asyncio.ensure_future(p.run(self.bus, stop, j)) for p, j in zip(processors, joined, strict=True)]
        for run in runs:  # one that fails later fails the host: a shard it says it serves would go unanswered
            run.add_done_callback(self._watch)
        self._serving[shard] = (stop, runs)
        ready: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(j.wait() for j in joined)))
        await asyncio.wait([ready, *runs], return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ready
            for run in runs:
                if run.done():
                    run.result()
        log.info("%s: serving shard %d from %s", self.name, shard, where)

    def _watch(self, run: asyncio.Future) -> None:
        error = None if run.cancelled() else run.exception()
        if error is not None:
            self.fail(error)

    async def _unserve(self, shard: int) -> None:
        held = self._serving.pop(shard, None)
        if held is None:
            return
        stop, runs = held
        for run in runs:
            run.remove_done_callback(self._watch)
        stop.set()  # drain: what is in flight is answered, then the shard's groups are left
        for run in runs:
            with contextlib.suppress(Exception):
                await run
        log.info("%s: no longer serving shard %d", self.name, shard)

    async def handle(self, request: ReplicaStatusRequest, context: RequestContext) -> ShardsStatus:
        shards = [ShardStatus(shard=s.shard, owner=s.owner, here=s.here) for s in self.shards.states()]
        return ShardsStatus(host=self.shards.host_id, log_topic=self.log_topic, shards=shards)
