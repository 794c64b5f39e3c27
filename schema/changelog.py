"""How the document stores' changes travel on their log (``topics.DOCUMENTS_LOG``), and a replica's status.

Every record of the documents log is a write request as the stores' writers take it, with its
kind in the ``KIND`` header:

- ``CHUNKS``: ``EmbeddedChunks``, one document's chunks of one version (staged) with their
  vectors and text: what doc-embeddings-store and keyword-store write;
- ``SWITCH``: ``DeleteDocument``: the switch to a staged version (``activate``), the removal of
  a document, or the discard of a staged version: what the stores' delete writers take;
- ``RECORD``: ``RecordDocument``, the library's entry of a document stored whole or removed.

All records of a document share its order key (``document_order``), so every replica applies
them in the order they were appended: a version's chunks, then the switch to it, then its
record. Keys say what compaction may forget: a document's switch or removal share one key (its
latest is its state); each staged run of chunks (each write's own), each discard and the record have keys of their own.
"""

from __future__ import annotations

import msgspec

from .common import Error

KIND = "ragbus-kind"
CHUNKS = "chunks"
SWITCH = "switch"
RECORD = "record"
KINDS = (CHUNKS, SWITCH, RECORD)

_SEP = "\x1f"  # in no collection name; a document id that holds it only makes its key longer


def document_order(collection: str, document_id: str) -> str:
    return f"{collection}{_SEP}{document_id}"


def chunks_key(collection: str, document_id: str, version: str, first_position: int, write: str) -> str:
    """The key of one staged run: of one write (``write``, its request id), never reused by a later one.

    A document edited and reverted stages its first version again. Were the key only the version's,
    the tombstone a lagging tombstoner appends for the first staging (superseded by the edit) could
    land after the second, and compaction would drop the live run. A write sent again (the same
    request) keeps its key, so a redelivery still replaces itself.
    """
    return f"{document_order(collection, document_id)}{_SEP}chunks{_SEP}{version}{_SEP}{first_position}{_SEP}{write}"


def state_key(collection: str, document_id: str) -> str:
    """The key of a document's switch or removal: the latest is what the stores hold of it."""
    return f"{document_order(collection, document_id)}{_SEP}state"


def discard_key(collection: str, document_id: str, version: str) -> str:
    return f"{document_order(collection, document_id)}{_SEP}discard{_SEP}{version}"


def record_key(collection: str, document_id: str) -> str:
    return f"{document_order(collection, document_id)}{_SEP}record"


# The log name of a write's token where the stores are files of a data dir, not the log (the embedded
# default, a shared data dir): there is nothing to wait for, and a read that carries one reloads its
# stores from the files first, so it sees every write answered before it was sent. Its position is the
# library's length after the write.
FILE_WRITES = "ragbus.changelog.files"


def token(topic: str, position: str) -> str:
    """What a write answers with (``IngestResult.seen``) and a read carries (``must_see``)."""
    return f"{topic}@{position}"


def parse_token(value: str) -> tuple[str, str]:
    topic, at, position = value.rpartition("@")
    if not at or not topic or not position:
        raise ValueError(f"{value[:100]!r} is not a log token (<log topic>@<position>, what an ingest answers)")
    return topic, position


class ReplicaStatusRequest(msgspec.Struct, kw_only=True):
    """Ask a stores replica where it stands (``documents-replica``)."""


class ReplicaStatus(msgspec.Struct, kw_only=True):
    """Where a stores replica stands on its log: records applied, whether it has caught up."""

    log_topic: str = ""
    data_dir: str = ""
    replayed: int = 0  # records applied from its own snapshot at start
    read: int = 0  # records read from the log since start
    caught_up: bool = False  # every record appended before the request was applied
    checkpoint: str = ""
    error: Error | None = None


class ShardStatus(msgspec.Struct, kw_only=True):
    """One shard of a collection's document stores as a sharded query host sees it."""

    shard: int
    owner: str = ""  # the host id the group's latest assignment gave it to ("": none known)
    here: str = ""  # on the host asked: "serving", "standby", "catching up", or "" (not kept here)


class ShardsStatus(msgspec.Struct, kw_only=True):
    """A sharded query host's shards (its answer to a ``ReplicaStatusRequest``)."""

    host: str = ""
    log_topic: str = ""
    shards: list[ShardStatus] = []
    error: Error | None = None


class ReplicaReport(msgspec.Struct, kw_only=True):
    """How far one replica has applied its log, as it said last (``REPLICAS_LOG``, ``ragbus status``)."""

    replica: str  # <processor>@<host>:<data dir> (a shard's replica: <host> is its shard host's host id)
    log_topic: str
    applied: int = 0  # records applied since it started (from its snapshot, then from the log)
    behind: int | None = None  # records of the log it had not applied yet; None: the backend cannot count
    caught_up: bool = False
    checkpoint: str = ""
    reported_at: float = 0.0  # Unix time of the report
    shard: int | None = None  # a shard's replica: which shard (``[stores] shards``); None: the whole log
    serving: bool | None = None  # a shard's replica: whether its host serves the shard (owner) or keeps a standby
    host: str = ""  # a shard's replica: its host's id in the shard owners' group
    shards: int | None = None  # a shard's replica: how many shards the log is split into; None: not sharded
