"""Log topics, on every backend: appended records read whole by any number of readers, then followed.

What a query replica that makes its stores from the log relies on: every record, in its key's
order, with its body, headers and key; tombstones as such; ``caught_up`` true only once every
record appended before the call was returned; ``covers`` for a position an append gave; and a
checkpoint that resumes right after it, in a new reader.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ragbus.bus import BusConfigError, BusError, LogReader, LogRecord, LogTopicsUnsupported
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.receiving import RECEIVE_TIMEOUT, read_to_end


@pytest.fixture
def log_topic():
    return f"{CHANGELOG_PREFIX}t-{uuid.uuid4().hex[:10]}"


async def read(reader: LogReader, n: int) -> list[LogRecord]:
    return [await asyncio.wait_for(reader.next(), RECEIVE_TIMEOUT) for _ in range(n)]


async def test_a_reader_gets_every_record_in_its_keys_order_with_tombstones(open_bus, log_topic):
    bus = await open_bus()
    appended = []
    for i in range(6):
        key = f"doc-{i % 3}"
        appended.append((key, await bus.append(log_topic, f"v{i}".encode(), key=key, headers={"n": str(i)})))
    appended.append(("doc-1", await bus.append(log_topic, None, key="doc-1")))
    async with await bus.read_log(log_topic) as reader:
        records = await read_to_end(reader)
        assert await reader.caught_up()
        assert all(reader.covers(position) for _, position in appended)
    assert len(records) == 7
    by_key: dict[str, list] = {}
    for r in records:
        assert r.topic == log_topic and r.timestamp is not None
        by_key.setdefault(r.key, []).append((r.body, dict(r.headers).get("n")))
    assert by_key == {
        "doc-0": [(b"v0", "0"), (b"v3", "3")],
        "doc-1": [(b"v1", "1"), (b"v4", "4"), (None, None)],
        "doc-2": [(b"v2", "2"), (b"v5", "5")],
    }
    assert {r.position for r in records} == {position for _, position in appended}


async def test_a_reader_follows_what_is_appended_after_it_caught_up(open_bus, log_topic):
    bus = await open_bus()
    first = await bus.append(log_topic, b"one", key="k")
    reader = await bus.read_log(log_topic)
    assert not reader.covers(first)
    assert [r.body for r in await read_to_end(reader)] == [b"one"]
    assert reader.covers(first)
    pending = asyncio.ensure_future(reader.next())
    await asyncio.sleep(0.2)
    assert not pending.done()  # nothing to read: it waits
    second = await bus.append(log_topic, b"two", key="k")
    record = await asyncio.wait_for(pending, RECEIVE_TIMEOUT)
    assert (record.body, record.position) == (b"two", second)
    assert reader.covers(second) and await reader.caught_up()
    await bus.append(log_topic, b"three", key="k")
    assert not await reader.caught_up()  # a record appended before the call is not returned yet
    await reader.close()


async def test_readers_each_read_all_and_a_checkpoint_resumes_right_after_it(open_bus, log_topic):
    bus = await open_bus()
    for i in range(4):
        await bus.append(log_topic, f"a{i}".encode(), key=f"k{i}")
    one, two = await bus.read_log(log_topic), await bus.read_log(log_topic)
    assert sorted(r.body for r in await read_to_end(one)) == sorted(r.body for r in await read_to_end(two))
    checkpoint = one.checkpoint()
    await one.close()
    later = [await bus.append(log_topic, f"b{i}".encode(), key=f"k{i}") for i in range(4)]
    # A new reader, on a new connection, from the checkpoint: only what came after it.
    other = await open_bus()
    resumed = await other.read_log(log_topic, after=checkpoint)
    assert sorted(r.body for r in await read_to_end(resumed)) == [b"b0", b"b1", b"b2", b"b3"]
    assert all(resumed.covers(p) for p in later)
    await resumed.close()
    # A reader's checkpoint before it read anything starts it where that reader started.
    fresh = await other.read_log(log_topic)
    again = await other.read_log(log_topic, after=fresh.checkpoint())
    assert len(await read_to_end(again)) == 8
    await fresh.close()
    await again.close()


async def test_records_of_one_order_key_stay_in_order_whatever_their_keys(open_bus, log_topic):
    bus = await open_bus()
    for i in range(12):
        await bus.append(log_topic, f"{i}".encode(), key=f"fact-{i}", order_key=f"graph-{i % 2}")
    async with await bus.read_log(log_topic) as reader:
        records = await read_to_end(reader)
    for order in ("graph-0", "graph-1"):
        mine = [int(r.body) for r in records if int(r.key.removeprefix("fact-")) % 2 == int(order[-1])]
        assert mine == sorted(mine) and len(mine) == 6


async def test_only_log_topics_are_appended_to_or_read_as_logs(open_bus, topic):
    bus = await open_bus()
    with pytest.raises(BusConfigError, match="not a log topic"):
        await bus.append(topic, b"x", key="k")
    with pytest.raises(BusConfigError, match="not a log topic"):
        await bus.read_log(topic)


async def test_the_latest_token_of_each_partition_covers_every_write_before_it(open_bus, log_topic):
    from ragbus.bus.positions import latest
    from ragbus.schema.changelog import parse_token, token

    bus = await open_bus()
    tokens = [token(log_topic, await bus.append(log_topic, f"{i}".encode(), key=f"d{i}")) for i in range(16)]
    kept = latest(tokens)
    assert 1 <= len(kept) < len(tokens) and set(kept) <= set(tokens)
    async with await bus.read_log(log_topic) as reader:
        while not all(reader.covers(parse_token(t)[1]) for t in kept):
            await asyncio.wait_for(reader.next(), RECEIVE_TIMEOUT)
        assert all(reader.covers(parse_token(t)[1]) for t in tokens)  # the latest of each partition says all


async def test_a_reader_of_some_partitions_gets_their_records_alone_and_resumes_from_its_checkpoint(
        open_bus, log_topic, backend):
    """What a shard's replica relies on: a reader of some partitions of a log returns every record whose
    order key the bus sends there, in order, and nothing else; it is caught up once it has those; its
    checkpoint resumes it there. Pulsar's log topics have no partitions and say so."""
    bus = await open_bus()
    if backend == "pulsar":
        with pytest.raises(LogTopicsUnsupported):
            await bus.read_log(log_topic, partitions=[0])
        return
    count = await bus.log_partitions(log_topic)
    assert count >= 2
    keys = [f"c/doc-{i}" for i in range(24)]
    where = {key: await bus.partition_of(log_topic, key) for key in keys}
    assert len(set(where.values())) >= 2  # the keys spread over the partitions
    wanted = {where[keys[0]]}
    for round_ in range(2):
        for key in keys:
            await bus.append(log_topic, f"{key} {round_}".encode(), key=f"{key}/{round_}", order_key=key)
    async with await bus.read_log(log_topic, partitions=wanted) as reader:
        records = await read_to_end(reader)
        assert await reader.caught_up() and await reader.behind() in (0, None)
        checkpoint = reader.checkpoint()
    mine = [key for key in keys if where[key] in wanted]
    assert sorted(r.body for r in records) == sorted(f"{key} {n}".encode() for key in mine for n in range(2))
    assert {r.partition for r in records} == wanted
    for key in mine:  # each order key's records in their order
        assert [r.body for r in records if r.body.startswith(f"{key} ".encode())] == [
            f"{key} 0".encode(), f"{key} 1".encode()]
    later = next(key for key in keys if where[key] not in wanted), mine[0]
    for key in later:
        await bus.append(log_topic, f"{key} later".encode(), key=f"{key}/later", order_key=key)
    async with await bus.read_log(log_topic, after=checkpoint, partitions=wanted) as resumed:
        assert [r.body for r in await read_to_end(resumed)] == [f"{mine[0]} later".encode()]
    with pytest.raises(BusError, match="partitions"):
        await bus.read_log(log_topic, partitions=[count])
