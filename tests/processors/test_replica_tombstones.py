"""The tombstones an ingestion host's replica appends let compaction forget only what is superseded.

On the in-process bus, whose log is never compacted: the test compacts it in its head (each key's
latest record; none for a key whose latest is a tombstone). A replica with ``tombstones`` started
on a log that already holds documents written twice replays the log from its start: an old switch
it replays must not tombstone the run of a version written after it (the live one), or compaction
would leave a document whose state names a version no run holds.
"""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest

from processors.bus import connect
from processors.bus.memory import drop_memory_broker
from processors.replica import DocumentsReplicaProcessor, ReplicaSettings
from schema import DeleteDocument, EmbeddedChunks
from schema.changelog import KIND
from schema.topics import CHANGELOG_PREFIX

from ..helpers.log_documents import write_documents

COUNT = 9  # doc-0 .. doc-8; every third written twice; doc-8 removed


@pytest.fixture
async def bus():
    name = f"tombstones-{uuid.uuid4().hex[:8]}"
    bus = await connect(f"memory://{name}")
    yield bus
    await bus.close()
    drop_memory_broker(name)


async def compacted(bus, log: str) -> dict[str, object]:
    latest = {}
    async with await bus.read_log(log) as reader:
        while not await reader.caught_up():
            record = await reader.next()
            latest[record.key] = record
    return {k: r for k, r in latest.items() if r.body is not None}


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
            found.setdefault(document, set()).add(f"state {switch.activate}")
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
    for _ in range(2):  # caught up, then again once the tombstones it appended are read too
        await asyncio.sleep(0.2)
        await asyncio.wait_for(_caught_up(replica.follower), 30)
    await replica.close()
    versions = live_versions(await compacted(bus, log))
    assert "doc-8" not in versions  # removed: nothing of it is kept
    assert sorted(versions) == [f"doc-{i}" for i in range(COUNT - 1)]
    for document, kept in versions.items():
        (state,) = [v.removeprefix("state ") for v in kept if v.startswith("state ")]
        assert kept == {f"state {state}", f"run {state}"}, (document, kept)


async def _caught_up(follower) -> None:
    for _ in range(1500):  # polled: caught_up() asks the log, there is no event to wait on
        if await follower.caught_up():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the replica did not catch up")
