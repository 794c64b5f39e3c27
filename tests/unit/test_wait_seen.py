"""A read that must see a write waits for this process's replica of the log, within a bound, and says why not."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.stores.seen import register_follower, unregister_follower
from ragbus.stores.seen import NotYetApplied, ReplicaMissing, wait_seen
from ragbus.stores.snapshots import CheckpointFile
from ragbus.stores.follower import LogFollower
from ragbus.schema import BadRequest
from ragbus.schema.changelog import token
from ragbus.schema.topics import CHANGELOG_PREFIX


@pytest.fixture
async def bus():
    name = f"seen{uuid.uuid4().hex[:8]}"
    opened = await connect(f"memory://{name}")
    yield opened
    await opened.close()
    drop_memory_broker(name)


async def test_a_read_waits_until_the_replica_applied_the_write_and_no_longer(bus, tmp_path):
    log = f"{CHANGELOG_PREFIX}t-{uuid.uuid4().hex[:6]}"
    applied: list[bytes | None] = []
    gate = asyncio.Event()

    async def apply(record):
        await gate.wait()  # the replica is slow: it applies only when let
        applied.append(record.body)

    gate.set()
    follower = LogFollower(bus, log, CheckpointFile(tmp_path / "cp"), apply)
    await follower.start()
    register_follower(follower, tmp_path)
    try:
        gate.clear()
        seen = token(log, await bus.append(log, b"doc", key="k"))
        waiting = asyncio.ensure_future(wait_seen([seen], tmp_path, log, timeout_s=10, from_log=True))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # not applied yet: the read waits
        gate.set()
        assert await asyncio.wait_for(waiting, 10) is True and applied == [b"doc"]
        # Tokens of other logs are other stores' to see: nothing to wait for here.
        other = token("ragbus.changelog.other", "0")
        assert await wait_seen([other], tmp_path, log, timeout_s=1, from_log=True) is False
        # Past the bound, the read fails saying the replica is behind.
        gate.clear()
        late = token(log, await bus.append(log, b"later", key="k"))
        with pytest.raises(NotYetApplied, match="behind the log"):
            await wait_seen([late], tmp_path, log, timeout_s=0.2, from_log=True)
        gate.set()
    finally:
        unregister_follower(follower, tmp_path)
        await follower.close()


async def test_a_token_that_is_not_one_is_a_bad_request_and_a_missing_replica_says_how_to_lay_them_out(tmp_path):
    log = f"{CHANGELOG_PREFIX}t-{uuid.uuid4().hex[:6]}"
    with pytest.raises(BadRequest, match="not a log token"):
        await wait_seen(["no-at-sign"], tmp_path, log, timeout_s=1, from_log=True)
    with pytest.raises(ReplicaMissing, match="run documents-replica in the same worker"):
        await wait_seen([token(log, "3")], tmp_path, log, timeout_s=1, from_log=True)
    # A store of a shared data dir has no log to wait for: its writes show within refresh_interval_s.
    assert await wait_seen([token(log, "3")], tmp_path, log, timeout_s=1, from_log=False) is False
    assert await wait_seen([], tmp_path, log, timeout_s=1, from_log=True) is False


async def test_a_read_the_replica_cannot_serve_yet_is_answered_and_logged_without_a_stack_trace(bus, tmp_path,
                                                                                                 caplog):
    from ragbus.config.settings import ProcessorSettings
    from ragbus.runtime.processor import Processor
    from ragbus.schema import IngestResult, ListDocuments

    from ..helpers.serving import client_on, serving

    class Behind(Processor):
        request_type, response_type = ListDocuments, IngestResult

        async def handle(self, request, context):
            if request.collection == "bug":
                raise KeyError("a bug")
            raise NotYetApplied("documents-replica is behind the log: 1 token not applied within 0.2 s")

    topic = f"behind-{uuid.uuid4().hex[:6]}"
    async with serving(bus, Behind(topic, ProcessorSettings(topic=topic, group=topic))), client_on(bus) as client:
        behind = await client.request(topic, ListDocuments(collection="c"), IngestResult, timeout=10)
        bug = await client.request(topic, ListDocuments(collection="bug"), IngestResult, timeout=10)
    assert behind.error is not None and behind.error.type == "NotYetApplied" and bug.error.type == "KeyError"
    logged = [r for r in caplog.records if r.name == "ragbus.runtime.processor"]
    assert [(r.levelname, r.exc_info is None) for r in logged] == [("WARNING", True), ("ERROR", False)]
    assert "NotYetApplied: documents-replica is behind the log" in logged[0].getMessage()  # a bug keeps its trace


async def test_a_record_applied_when_the_replica_closes_is_in_its_copy_and_not_read_again(bus, tmp_path):
    import threading

    log = f"{CHANGELOG_PREFIX}t-{uuid.uuid4().hex[:6]}"

    applied = asyncio.Event()

    async def apply(record):
        applied.set()

    follower = LogFollower(bus, log, CheckpointFile(tmp_path / "cp"), apply)
    await follower.start()
    # The copy's thread is busy (a sync, say): the record's write to the copy waits its turn.
    free = threading.Event()
    busy = asyncio.ensure_future(follower._io.run(free.wait, 10))
    await asyncio.sleep(0)
    position = await bus.append(log, b"doc", key="k")
    await asyncio.wait_for(applied.wait(), 10)
    await asyncio.sleep(0.05)
    assert follower.covers(position)
    closing = asyncio.ensure_future(follower.close())  # applied, its write still queued
    await asyncio.sleep(0.05)
    free.set()
    await asyncio.wait_for(asyncio.gather(closing, busy), 10)
    again = LogFollower(bus, log, CheckpointFile(tmp_path / "cp"), apply)
    await again.start()
    try:
        assert again.read == 0  # the close let the write finish: the copy holds the record
    finally:
        await again.close()
