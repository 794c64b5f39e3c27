"""A host's document stores made from the bus's log: the documents-replica processor (``processor.py``)."""

from .processor import DocumentsReplicaProcessor
from ragbus.stores.replica_settings import ReplicaSettings

__all__ = ["DocumentsReplicaProcessor", "ReplicaSettings"]
