"""Every default of the documents-replica processor, in one place (``[processors.documents-replica]``).

Its ``data_dir`` is the host's own: the query processors of the host (doc-embeddings-query,
fetch-chunk, keyword-query, documents-query) name the same one and read what it writes.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ragbus.config.settings import StoreSettings


class ReplicaSettings(StoreSettings, kw_only=True, forbid_unknown_fields=True):
    # How often, at most, the replica's checkpoint (where it stands on the log) is made durable while it
    # follows the log; it is also written once caught up and on close. A replica killed in between
    # applies the records after its checkpoint again (every store write is idempotent).
    sync_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    # Append the tombstones that let the broker's compaction forget what a document's switch or removal
    # superseded: the runs of its other versions, a discarded version's runs, a removed document's every
    # key. One replica of a deployment is enough (the ingestion host's); another appends the same ones
    # again, which is harmless. At start it reads the log's keys once from the start, to know every run.
    tombstones: bool = False
    # While catching up (at start, before it says ready), the faiss stores publish the records applied
    # once per batch: at least this far apart (and twice as long as the last publish took), so a
    # catch-up rewrites a collection's files a few times, not once per document. A replica killed
    # mid-batch reads that batch again. Once caught up, each record is published as it is applied.
    # 0: no batches, every record published as it is applied.
    batch_s: Annotated[float, msgspec.Meta(ge=0)] = 5.0
    # How often the replica checks that its data dir is still the one it started on: one removed or
    # replaced under it makes the worker exit, to be started again and rebuild from the log.
    data_dir_check_s: Annotated[float, msgspec.Meta(gt=0)] = 1.0
