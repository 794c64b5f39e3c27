"""Concurrent writers of one document, with stores from the log: the log's order decides, on every replica.

Two writers stage versions X and Y of a document that serves W; their switches, records and a
removal reach the log interleaved. Whatever the interleaving, the last switch (or removal) in the
log is what every replica serves, whole, in faiss, tantivy and the library: a replica following the
log, one reading it from empty in batches, and one reading the log as compaction leaves it after
the ingestion host's tombstones. Before this held, a switch dropped every other staged version, so a
later switch to one found nothing staged and was skipped, while its record still named it.
"""

from __future__ import annotations

import uuid

import pytest

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.replica import DocumentsReplicaProcessor, ReplicaSettings
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.log_documents import LogWriters, caught_up, compact_past_retention, served_document

W, X, Y = 0, 1, 2  # editions of doc-0: W is served before the two writers start
REMOVED = None

# (steps in log order, what every replica must serve at the end)
INTERLEAVINGS = {
    "Y switches first, X last": ([("stage", X), ("stage", Y), ("switch", Y), ("switch", X), ("record", Y),
                                  ("record", X)], X),
    "X switches first, records in order": ([("stage", X), ("stage", Y), ("switch", X), ("switch", Y),
                                            ("record", X), ("record", Y)], Y),
    "X switches first, its record last": ([("stage", X), ("stage", Y), ("switch", X), ("switch", Y),
                                           ("record", Y), ("record", X)], Y),
    "a removal between X staged and switched": ([("stage", X), ("remove", None), ("switch", X),
                                                 ("record-removal", None), ("record", X)], X),
    "a removal after X switched, before its record": ([("stage", X), ("switch", X), ("remove", None),
                                                        ("record", X), ("record-removal", None)], REMOVED),
    "writers from before entries on switches": ([("stage", X), ("stage", Y), ("old-switch", Y), ("old-switch", X),
                                                 ("record", Y), ("record", X)], X),
}


@pytest.fixture
async def bus():
    name = f"writers-{uuid.uuid4().hex[:8]}"
    bus = await connect(f"memory://{name}")
    yield bus
    await bus.close()
    drop_memory_broker(name)


async def write(writers: LogWriters, steps) -> None:
    await writers.stage(0, W)
    await writers.activate(0, W)
    for step, edition in steps:
        if step == "stage":
            await writers.stage(0, edition)
        elif step in ("switch", "old-switch"):
            await writers.switch_to(0, edition, entry=step == "switch")
        elif step == "record":
            await writers.record_of(0, edition)
        elif step == "remove":
            await writers.remove_from_stores(0)
        else:
            await writers.record_removal(0)


async def replica(bus, log: str, directory, **settings) -> DocumentsReplicaProcessor:
    started = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(
        data_dir=str(directory), log_topic=log, **settings))
    started.bus = bus
    await started.start()
    return started


async def settled(*replicas: DocumentsReplicaProcessor) -> None:
    for r in replicas:
        assert r.follower is not None
        await caught_up(r.follower)
        await r.close()


def served(directory) -> tuple[dict[str, int], dict[str, int], str | None, str]:
    return served_document(directory, "c", "doc-0")


@pytest.mark.parametrize("case", INTERLEAVINGS)
async def test_every_replica_serves_the_last_switch_in_every_store_and_the_library(bus, tmp_path, case):
    steps, last = INTERLEAVINGS[case]
    log = f"{CHANGELOG_PREFIX}documents-{uuid.uuid4().hex[:8]}"
    following = await replica(bus, log, tmp_path / "following", batch_s=0)
    tombstoner = await replica(bus, log, tmp_path / "ingestion", batch_s=0, tombstones=True)
    async with LogWriters(bus, log) as writers:
        await write(writers, steps)
    await settled(following, tombstoner)
    await settled(await replica(bus, log, tmp_path / "from-empty", batch_s=5.0))  # in one batch, deferred
    await settled(await replica(bus, await compact_past_retention(bus, log), tmp_path / "from-compacted"))

    version = None if last is REMOVED else LogWriters.version(0, last)
    want = ({version: 3}, {version: 3}, version) if version else ({}, {}, None)
    for host in ("following", "ingestion", "from-empty", "from-compacted"):
        vectors, keyword, library, seen = served(tmp_path / host)
        assert (vectors, keyword, library) == want, (host, case)
        if version and not case.startswith("writers from before"):  # the library names the switch it follows
            assert seen.startswith(log) and "@" in seen, (host, seen)
