"""documents-replica: a host's document stores made from the documents log, as a processor.

On a deployment whose document stores come from the log (``changelog = true``), each query host
runs one documents-replica with a data dir of its own; the host's query processors read that
data dir. The work is ``processors/stores/documents_replica.py``'s; this adapter starts it before
the host's query processors (they join once it caught up), fails the worker when its data dir is
removed under it, and answers ``ReplicaStatusRequest`` on its topic with where it stands.
"""

from __future__ import annotations

from ragbus.config.settings import data_dir
from ragbus.runtime.processor import Processor, RequestContext
from ragbus.schema.changelog import ReplicaStatus, ReplicaStatusRequest
from ragbus.schema.topics import DOCUMENTS_LOG
from ragbus.stores.documents_replica import DocumentsReplica
from ragbus.stores.follower import LogFollower
from ragbus.stores.replica_settings import ReplicaSettings


class DocumentsReplicaProcessor(Processor[ReplicaStatusRequest, ReplicaStatus]):
    request_type = ReplicaStatusRequest
    response_type = ReplicaStatus
    Settings = ReplicaSettings
    settings: ReplicaSettings
    starts_first = True  # the host's query processors read the data dir it makes: they join once it caught up

    def __init__(self, name: str, settings: ReplicaSettings) -> None:
        super().__init__(name, settings)
        self.data_dir = data_dir(settings.data_dir)
        self.log_topic = settings.log_topic or DOCUMENTS_LOG
        self.replica = DocumentsReplica(name, self.data_dir, self.log_topic, settings, self.fail)

    @property
    def follower(self) -> LogFollower | None:
        """The replica's follower of the log (None before start and after close)."""
        return self.replica.follower

    async def start(self) -> None:
        await self.replica.start(self.bus)

    async def close(self) -> None:
        await self.replica.close()

    async def handle(self, request: ReplicaStatusRequest, context: RequestContext) -> ReplicaStatus:
        return await self.replica.status()
