"""Shards of a collection: sets of the documents log's partitions, and the topics each is served on.

With ``[stores] shards = N`` shard ``k`` holds the partitions ``p`` of the documents log with
``p % N == k`` (the order key sends each document to one partition, so to one shard), and its
query processors serve ``<topic>.shard-<k>`` (doc-embeddings-query, keyword-query, fetch-chunk).
N = 0: unsharded, every host holds every partition. docs/stores-from-the-log.md, "Sharding".
"""

from __future__ import annotations

SHARD_MARK = ".shard-"


def shard_topic(topic: str, shard: int) -> str:
    """The request topic of one shard's processor serving ``topic``."""
    if shard < 0:
        raise ValueError(f"a shard is a number >= 0, got {shard}")
    return f"{topic}{SHARD_MARK}{shard}"


def shard_of(partition: int, shards: int) -> int:
    """The shard that holds ``partition`` of the documents log."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1 to ask for a shard, got {shards}")
    return divmod(partition, shards)[1]


def shard_partitions(shard: int, shards: int, partitions: int) -> list[int]:
    """The partitions of a log of ``partitions`` that ``shard`` of ``shards`` holds.

    ``ValueError`` when the log cannot be split so: fewer partitions than shards, or a count that is
    not a multiple of them (shards would hold unequal parts of the collection)."""
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard {shard} of {shards} does not exist")
    if partitions < shards or divmod(partitions, shards)[1]:
        raise ValueError(f"a log of {partitions} partitions cannot be split into {shards} equal shards: "
                         f"make it with a multiple of {shards} partitions (the number of shards is fixed "
                         "when the log is made; docs/stores-from-the-log.md, Sharding)")
    return [p for p in range(partitions) if divmod(p, shards)[1] == shard]
