"""A host's document stores made from the bus's log: documents-replica (``processor.py``), and shard-host
(``shards.py``), a query host's shards of them."""

from .processor import DocumentsReplicaProcessor
from .shards import ShardHostProcessor, ShardHostSettings
from ragbus.stores.replica_settings import ReplicaSettings

__all__ = ["DocumentsReplicaProcessor", "ReplicaSettings", "ShardHostProcessor", "ShardHostSettings"]
