"""A replica catching up applies its log in batches: published once per batch, counted applied only after.

On the in-process bus (the batching is the follower's and the stores', not the broker's): a
follower given ``batch`` applies records between a begin and an end, and neither ``covers`` a
position nor writes a checkpoint past it before its batch ended; an end that fails leaves the
checkpoint where it was. A documents-replica catching up with many documents rewrites its faiss
files once per batch, not once per document, and holds what applying them one at a time would; one
killed before a batch that switched a document was published switches it again after its restart.
"""

from __future__ import annotations

import uuid

import pytest

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.stores.vectors.store import GENERATION_FILE, VectorStore
from ragbus.stores.layout import vectors_dir
from ragbus.keyword import KeywordIndex, KeywordSettings
from ragbus.replica import DocumentsReplicaProcessor, ReplicaSettings
from ragbus.stores.documents_replica import DocumentsReplica
from ragbus.stores.snapshots import CheckpointFile
from ragbus.stores.follower import LogFollower
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.log_documents import LogWriters, write_documents


@pytest.fixture
async def bus():
    name = f"batches-{uuid.uuid4().hex[:8]}"
    bus = await connect(f"memory://{name}")
    yield bus
    await bus.close()
    drop_memory_broker(name)


class Batches:
    """The follower's begin and end, with what the replica could see at each step."""

    def __init__(self) -> None:
        self.begun = self.ended = 0
        self.fail_end = False

    async def begin(self) -> None:
        self.begun += 1

    async def end(self) -> None:
        self.ended += 1
        if self.fail_end:
            raise OSError("disk full")


async def test_a_batch_counts_as_applied_and_is_checkpointed_only_once_it_ended(bus, tmp_path):
    log = f"{CHANGELOG_PREFIX}batches"
    positions = [await bus.append(log, f"r{i}".encode(), key=f"k{i}") for i in range(30)]
    batches, covered_while_applying = Batches(), []
    follower: LogFollower

    async def apply(record) -> None:
        covered_while_applying.append(follower.covers(positions[0]))

    path = tmp_path / "checkpoint"
    follower = LogFollower(bus, log, CheckpointFile(path), apply, batch=(batches.begin, batches.end), batch_s=60)
    await follower.start()
    try:
        assert (batches.begun, batches.ended) == (1, 1)
        assert covered_while_applying == [False] * 30  # the first record too: its batch had not ended
        assert all(follower.covers(p) for p in positions) and follower.read == 30
        assert path.read_text().strip() == follower.checkpoint()
        # Once caught up, a record is applied (and covered) alone, with no batch.
        later = await bus.append(log, b"later", key="k")
        assert await follower.wait_for(later, 10) and batches.begun == 1
    finally:
        await follower.close()


async def test_short_batches_each_end_and_a_failed_end_keeps_the_checkpoint(bus, tmp_path):
    log = f"{CHANGELOG_PREFIX}short"
    for i in range(5):
        await bus.append(log, b"x", key=f"k{i}")
    batches = Batches()

    async def apply(record) -> None:
        pass

    follower = LogFollower(bus, log, CheckpointFile(tmp_path / "a"), apply, batch=(batches.begin, batches.end),
                           batch_s=1e-9)
    await follower.start()
    await follower.close()
    assert batches.begun == batches.ended >= 2  # a batch at least every record's length apart

    failing = Batches()
    failing.fail_end = True
    follower = LogFollower(bus, log, CheckpointFile(tmp_path / "b"), apply, batch=(failing.begin, failing.end))
    with pytest.raises(OSError, match="disk full"):
        await follower.start()
    await follower.close()
    assert not (tmp_path / "b").exists()  # nothing claims the batch applied: a restart reads it again


async def _replica(bus, log: str, directory, batch_s: float) -> VectorStore:
    replica = DocumentsReplicaProcessor("documents-replica",
                                        ReplicaSettings(data_dir=str(directory), log_topic=log, batch_s=batch_s))
    replica.bus = bus
    await replica.start()
    await replica.close()
    return VectorStore(vectors_dir(directory, "c"), "c", readonly=True)


async def test_a_replica_catching_up_publishes_per_batch_what_one_record_at_a_time_would(bus, tmp_path):
    log = f"{CHANGELOG_PREFIX}documents-batches"
    await write_documents(bus, log, 24)
    batched = await _replica(bus, log, tmp_path / "batched", batch_s=60)
    alone = await _replica(bus, log, tmp_path / "alone", batch_s=0)  # no batches: a publish per switch
    generations = {d: int((vectors_dir(tmp_path / d, "c") / GENERATION_FILE).read_text())
                   for d in ("batched", "alone")}
    assert generations["batched"] == 1 and generations["alone"] == 24 + 8 + 1, generations
    assert batched.count() == 23 * 3
    assert sorted(r.chunk_id for r in batched._rows) == sorted(r.chunk_id for r in alone._rows)
    assert {r.text for r in batched._rows} == {r.text for r in alone._rows}
    assert "text 0 of 3, edition 1" in {r.text for r in batched._rows}  # the new version, whole
    assert not any(r.text.endswith("edition 0") and r.document_id == "doc-3" for r in batched._rows)


async def test_a_replica_killed_before_its_batch_was_published_switches_again_after_the_restart(
        bus, tmp_path, monkeypatch):
    """A switch applied in a batch that never ended (the replica killed) is read again from the checkpoint
    at the restart, and what was staged for it is still there to switch to, in faiss and in tantivy; while
    a version staged after a switch in the same batch is kept for its own switch."""
    log = f"{CHANGELOG_PREFIX}documents-killed"
    async with LogWriters(bus, log) as writers:
        await writers.stage(0)
        await writers.stage(1)
        await _replica(bus, log, tmp_path, batch_s=60)  # the versions staged, the checkpoint past them
        await writers.activate(0)
        await writers.activate(1)
        await writers.stage(1, edition=1)  # document 1's next load, after its switch, in the same batch

        async def killed(self) -> None:  # the batch's end never comes: what it switched is not published
            raise OSError("killed")

        with monkeypatch.context() as patched:
            patched.setattr(DocumentsReplica, "_end_batch", killed)
            with pytest.raises(OSError, match="killed"):
                await _replica(bus, log, tmp_path, batch_s=60)
        assert VectorStore(vectors_dir(tmp_path, "c"), "c", readonly=True).count() == 0
        store = await _replica(bus, log, tmp_path, batch_s=60)  # restarted: the batch read and published again
        assert sorted(r.text for r in store._rows) == sorted(f"text {p} of {d}, edition 0" for d in (0, 1)
                                                             for p in range(3))
        await writers.activate(1, edition=1)  # switched to in a later batch: its staged chunks were kept
    store = await _replica(bus, log, tmp_path, batch_s=60)
    assert sorted(r.text for r in store._rows) == sorted(
        [f"text {p} of 0, edition 0" for p in range(3)] + [f"text {p} of 1, edition 1" for p in range(3)])
    index = KeywordIndex.open_reader(tmp_path, "c", KeywordSettings())
    assert index is not None and index.count() == 6
    assert {m.chunk_id for m in index.search("edition", 10)} == {f"doc-{d}#{p}" for d in (0, 1) for p in range(3)}
    assert not [f for f in (tmp_path / "c" / "staged").rglob("*") if f.is_file()]  # published: the staging went


async def test_a_replica_closed_and_started_again_applies_what_was_written_meanwhile(bus, tmp_path):
    """The same replica object started after a close (its writers' threads made anew) goes on from its
    checkpoint: what was written while it was closed is applied, what it had applied stays."""
    log = f"{CHANGELOG_PREFIX}documents-again"
    replica = DocumentsReplicaProcessor("documents-replica",
                                        ReplicaSettings(data_dir=str(tmp_path), log_topic=log, batch_s=0))
    replica.bus = bus
    async with LogWriters(bus, log) as writers:
        await writers.stage(0)
        await writers.activate(0)
        await replica.start()
        await replica.close()
        await writers.stage(1)
        await writers.activate(1)
        await replica.start()
        try:
            assert replica.follower is not None and replica.follower.read == 3  # doc-1 staged, switched, recorded
        finally:
            await replica.close()
    store = VectorStore(vectors_dir(tmp_path, "c"), "c", readonly=True)
    assert sorted({r.document_id for r in store._rows}) == ["doc-0", "doc-1"]
