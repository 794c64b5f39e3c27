"""The graph made from the bus's log: writers append, each kg-query replica makes its own graphs in its own dir.

On every backend: two kg-store writers and kg-query replicas with data dirs of their own (nothing
shared but the bus); a replica started later catches up from the log; a replica restarted
replays its local copy and reads only what came after it; a retraction reaches every replica
while ``as_of`` before it still shows the fact; a second replica on one dir is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from ragbus.kg import KgQueryProcessor, KgStoreProcessor
from ragbus.kg.settings import KgSettings
from ragbus.stores.snapshots import ReplicaDirInUse
from ragbus.schema import Entity, Fact, IngestResult, KgQueryRequest, KgQueryResponse, LoadTriples
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.serving import client_on, serving

QUESTION = "Who was head of government of the United Kingdom?"


def brown(source: str = "offices") -> LoadTriples:
    return LoadTriples(
        entities=[Entity(id="Gordon Brown", type="Person"), Entity(id="United Kingdom", type="Country")],
        facts=[Fact("Gordon Brown", "head_of_government_of", "United Kingdom", valid_from="2007-06-27",
                    valid_until="2010-05-11", source=source, id="uk-pm:brown")],
    )


def cameron(source: str = "offices-2") -> LoadTriples:
    return LoadTriples(
        entities=[Entity(id="David Cameron", type="Person")],
        facts=[Fact("David Cameron", "head_of_government_of", "United Kingdom", valid_from="2010-05-11",
                    valid_until="2016-07-13", source=source, id="uk-pm:cameron")],
    )


@pytest.fixture
def names():
    suffix = uuid.uuid4().hex[:8]
    return {"log": f"{CHANGELOG_PREFIX}graph-{suffix}", "load": f"triples-{suffix}", "query": f"kgq-{suffix}",
            "collection": f"c{suffix}", "suffix": suffix}


def store(names, data_dir, n: int = 1) -> KgStoreProcessor:
    return KgStoreProcessor(f"kg-store-{n}", KgSettings(
        topic=names["load"], group=f"store-{names['suffix']}", data_dir=str(data_dir), changelog=True,
        log_topic=names["log"]))


def query(names, data_dir, n: int) -> KgQueryProcessor:
    # Each replica in a group of its own, on a topic of its own: the test asks each one.
    return KgQueryProcessor("kg-query", KgSettings(
        topic=f"{names['query']}-{n}", group=f"query-{names['suffix']}-{n}", data_dir=str(data_dir),
        changelog=True, log_topic=names["log"]))


async def load(client, names, batch: LoadTriples) -> IngestResult:
    batch = msgspec.structs.replace(batch, collection=names["collection"])
    result = await client.request(names["load"], batch, IngestResult, timeout=60)
    assert result.error is None, result.error
    return result


async def heads(client, names, n: int, at_time: str, as_of: str | None = None, must_see=()) -> list[str]:
    """The facts' heads on replica ``n``; ``must_see``: the loads it must have applied first."""
    r = await client.request(f"{names['query']}-{n}", KgQueryRequest(
        question=QUESTION, collection=names["collection"], at_time=at_time, as_of=as_of, must_see=list(must_see)),
        KgQueryResponse, timeout=60)
    assert r.error is None, r.error
    return sorted(f.head for f in r.facts)


async def test_writers_append_and_every_replica_makes_its_own_graph(open_bus, names, tmp_path):
    bus = await open_bus()
    one, two = query(names, tmp_path / "host-a", 1), query(names, tmp_path / "host-b", 2)
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(client_on(bus))
        await stack.enter_async_context(serving(bus, store(names, tmp_path / "writer-1", 1)))
        await stack.enter_async_context(serving(bus, store(names, tmp_path / "writer-2", 2)))
        await stack.enter_async_context(serving(bus, one))
        first = await load(client, names, brown())
        assert (first.count, first.unchanged, first.rejected) == (3, 0, [])
        again = await load(client, names, brown())  # a reload changes nothing, whichever writer takes it
        assert (again.count, again.unchanged) == (0, 3)
        later = await load(client, names, cameron())
        assert len(later.seen) == 1  # where the log holds the batch: a read that must see it carries it
        # The writer replied once its own copy applied the batch; replica 1 applies it on its own time.
        assert await heads(client, names, 1, "2008-01-01", must_see=later.seen) == ["Gordon Brown"]
        # A replica started later, on another "host": it catches up from the log before it is ready.
        await stack.enter_async_context(serving(bus, two))
        assert two._from_log is not None and two._from_log.follower.read == 3  # every load, the reload too
        assert await heads(client, names, 2, "2012-01-01") == ["David Cameron"]
        known = datetime.now(UTC).isoformat()
        await asyncio.sleep(0.01)
        # A deleted document's facts: retracted on every replica; as known before, still there.
        retracted = await load(client, names, LoadTriples(retract_sources=["offices-2"]))
        assert retracted.retracted == 1
        for n in (1, 2):
            assert await heads(client, names, n, "2012-01-01", must_see=retracted.seen) == []
            assert await heads(client, names, n, "2012-01-01", as_of=known) == ["David Cameron"]
        # Nothing of the graph is in the writers' or replicas' data dirs but the replicas' own copies.
        assert not list(tmp_path.glob("*/*/graph/log"))
        assert sorted(p.relative_to(tmp_path).parts[0] for p in tmp_path.glob("*/.replicas/*/graph.log")) == [
            "host-a", "host-b", "writer-1", "writer-2"]


async def test_a_replica_restarts_from_its_copy_and_reads_only_what_came_after(open_bus, names, tmp_path):
    bus = await open_bus()
    host = tmp_path / "host-a"
    async with client_on(bus) as client, serving(bus, store(names, tmp_path / "writer")):
        first = query(names, host, 1)
        async with serving(bus, first):
            await load(client, names, brown())
            # A record after the batch, in its order: once the replica applied it, it applied the batch.
            position = await bus.append(names["log"], None, key="marker", order_key=names["collection"])
            assert first._from_log is not None and await first._from_log.follower.wait_for(position, 30)
            await load(client, names, cameron())
            # The writer replied once it applied the batch; this replica applies it on its own time.
            position = await bus.append(names["log"], None, key="marker-2", order_key=names["collection"])
            assert await first._from_log.follower.wait_for(position, 30)
        await load(client, names, LoadTriples(retract_sources=["offices"]))  # while the replica is down
        again = query(names, host, 1)
        async with serving(bus, again):
            assert again._from_log is not None
            assert (again._from_log.follower.replayed, again._from_log.follower.read) == (4, 1)
            assert await heads(client, names, 1, "2008-01-01") == []
            assert await heads(client, names, 1, "2012-01-01") == ["David Cameron"]
            # A second replica given the same data dir is refused, saying why.
            with pytest.raises(ReplicaDirInUse, match="data dir of its own"):
                async with serving(bus, query(names, host, 3)):
                    pass
