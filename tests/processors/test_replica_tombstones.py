"""The tombstones an ingestion host's replica appends let compaction forget only what is superseded.

On the in-process bus, whose log is never compacted: the test compacts it in its head (each key's
latest record; none for a key whose latest is a tombstone). A replica with ``tombstones`` started
on a log that already holds documents written twice replays the log from its start: an old switch
it replays must not tombstone the run of a version written after it (the live one), or compaction
would leave a document whose state names a version no run holds. A removal is not tombstoned: a
replica that lagged behind the log while it was compacted reads it and removes the document.
"""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.replica import DocumentsReplicaProcessor, ReplicaSettings
from ragbus.schema import DeleteDocument, EmbeddedChunks, RecordDocument
from ragbus.schema.changelog import KIND
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.log_documents import LogWriters, caught_up, compact_past_retention, compacted, held, write_documents

COUNT = 9  # doc-0 .. doc-8; every third written twice; doc-8 removed


@pytest.fixture
async def bus():
    name = f"tombstones-{uuid.uuid4().hex[:8]}"
    bus = await connect(f"memory://{name}")
    yield bus
    await bus.close()
    drop_memory_broker(name)


def live_versions(kept) -> dict[str, set[str]]:
    """Each document's versions among the runs compaction keeps, and its state's version."""
    found: dict[str, set[str]] = {}
    for record in kept.values():
        document = record.key.split("\x1f")[1]
        if record.headers[KIND] == "chunks":
            run = msgspec.msgpack.decode(record.body, type=EmbeddedChunks)
            found.setdefault(document, set()).add(f"run {run.chunks[0].generation}")
        elif record.headers[KIND] == "switch":
            switch = msgspec.msgpack.decode(record.body, type=DeleteDocument)
            found.setdefault(document, set()).add(f"state {switch.activate}" if switch.activate else "removed")
        elif msgspec.msgpack.decode(record.body, type=RecordDocument).removed:
            found.setdefault(document, set()).add("record of its removal")
    return found


@pytest.mark.parametrize("started", ["before the writes", "after the writes"])
async def test_compaction_keeps_each_documents_live_version_whole(bus, tmp_path, started):
    log = f"{CHANGELOG_PREFIX}documents-{uuid.uuid4().hex[:8]}"
    replica = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(
        data_dir=str(tmp_path), log_topic=log, tombstones=True, batch_s=0))
    replica.bus = bus
    if started == "before the writes":
        await replica.start()
    await write_documents(bus, log, COUNT)
    if started == "after the writes":
        await replica.start()  # from empty: it learns the log's runs, then replays it from its start
    assert replica.follower is not None
    # Caught up: every record applied, so every tombstone appended, and read back too.
    await asyncio.wait_for(caught_up(replica.follower), 30)
    await replica.close()
    versions = live_versions(await compacted(bus, log))
    # Removed: no run of it is kept, its removal is (a replica that lagged past the compaction reads it).
    assert versions.pop("doc-8") == {"removed", "record of its removal"}
    assert sorted(versions) == [f"doc-{i}" for i in range(COUNT - 1)]
    for document, kept in versions.items():
        (state,) = [v.removeprefix("state ") for v in kept if v.startswith("state ")]
        assert kept == {f"state {state}", f"run {state}"}, (document, kept)


async def test_a_version_written_again_is_not_tombstoned_by_a_tombstoner_behind_the_log(bus, tmp_path):
    """A document edited and then reverted: its first version is staged again, under the key it had,
    while the tombstoner still applies the switch that superseded it. The tombstone it appends for
    the first run must not land on the run written again, or compaction would keep a state whose
    version no run holds (a new replica would not serve the document)."""
    log = f"{CHANGELOG_PREFIX}documents-{uuid.uuid4().hex[:8]}"
    tombstoner = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(
        data_dir=str(tmp_path / "ingest"), log_topic=log, tombstones=True, batch_s=0))
    tombstoner.bus = bus
    edited = LogWriters.version(0, 1)
    reached, release = asyncio.Event(), asyncio.Event()
    apply = tombstoner.replica._apply

    async def behind(record) -> None:  # the tombstoner is slow at the switch to the edit
        if record.body is not None and record.headers.get(KIND) == "switch" and \
                msgspec.msgpack.decode(record.body, type=DeleteDocument).activate == edited:
            reached.set()
            await release.wait()
        await apply(record)

    tombstoner.replica._apply = behind  # type: ignore[method-assign]
    await tombstoner.start()
    try:
        async with LogWriters(bus, log) as writers:
            await writers.stage(0, 0)
            await writers.activate(0, 0)
            await writers.stage(0, 1)
            await writers.activate(0, 1)
            await asyncio.wait_for(reached.wait(), 30)
            await writers.stage(0, 0)  # reverted: the first version again
            await writers.activate(0, 0)
        release.set()
        assert tombstoner.follower is not None
        await asyncio.wait_for(caught_up(tombstoner.follower), 30)
    finally:
        release.set()
        await tombstoner.close()
    first = LogWriters.version(0, 0)
    assert live_versions(await compacted(bus, log)) == {"doc-0": {f"state {first}", f"run {first}"}}


async def test_a_replica_that_lagged_past_the_compaction_of_a_removal_still_removes_the_document(bus, tmp_path):
    """A replica that holds a document and reads the log only once it was compacted past the document's
    removal: what compaction keeps of the removal removes the document from its stores and library."""
    log = f"{CHANGELOG_PREFIX}documents-{uuid.uuid4().hex[:8]}"
    tombstoner = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(
        data_dir=str(tmp_path / "ingest"), log_topic=log, tombstones=True, batch_s=0))
    tombstoner.bus = bus
    await tombstoner.start()
    lagging = tmp_path / "lagging"
    try:
        async with LogWriters(bus, log) as writers:
            for i in range(2):
                await writers.stage(i)
                await writers.activate(i)
            await _replica(bus, log, lagging)  # holds both documents, then is gone for a while
            assert held(lagging) == ({"doc-0", "doc-1"}, {"doc-0", "doc-1"}, {"doc-0", "doc-1"})
            await writers.remove(1)
        assert tombstoner.follower is not None
        await asyncio.wait_for(caught_up(tombstoner.follower), 30)  # the removal and the record applied
    finally:
        await tombstoner.close()
    # The broker's compaction, in the test's head, once its tombstones are past delete.retention.ms too: the lagging
    # replica comes back to a log holding each key's latest record only, at the positions it had (a copy whose
    # gaps are records of a key nothing else uses; its checkpoint is a position of the log it had read).
    compacted_log = await compact_past_retention(bus, log)
    await _replica(bus, compacted_log, lagging)
    assert held(lagging) == ({"doc-0"}, {"doc-0"}, {"doc-0"})


async def _replica(bus, log: str, directory) -> None:
    replica = DocumentsReplicaProcessor("documents-replica", ReplicaSettings(data_dir=str(directory), log_topic=log))
    replica.bus = bus
    await replica.start()
    await replica.close()
