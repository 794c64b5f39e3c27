"""Shards of the document stores owned through the broker: each query host keeps and serves only its own.

An ingestion host appends to the documents log; sharded query hosts (shard-host) join the owners'
group. One host alone owns every shard; a second takes half; when the first stops, the second
serves them all. Each shard's processors hold the documents of that shard's partitions and no
other, and a read that must see writes of other shards' partitions is answered at once.
``ragbus status`` names each shard's owner and standbys, as the hosts' replicas report them.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import msgspec
import pytest

from ragbus.cli.main import build_parser
from ragbus.ingestion import ingest
from ragbus.runtime.pipeline_status import statuses
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.worker import processors_running
from ragbus.schema import Document, KeywordQueryRequest, KeywordQueryResponse
from ragbus.schema.changelog import ReplicaStatusRequest, ShardsStatus, document_order
from ragbus.schema.shards import shard_of, shard_topic
from ragbus.schema.topics import CHANGELOG_PREFIX
from ragbus.stores.shards import ShardingUnsupported

from ..helpers.serving import client_on
from ..helpers.documents_log import INGESTION, bus_url, host_settings  # noqa: F401 (bus_url: the fixture)

SHARDS = 2
SERVED = ("doc-embeddings-query", "fetch-chunk", "keyword-query")
WORDS = ["amber", "basil", "cedar", "dune", "ember", "fjord", "grove", "heron", "iris", "juniper", "kelp", "lichen"]


ASKING = ("embed", "prompt", "document-rag")


def sharded_host(tmp_path, log: str, suffix: str, host: str):
    settings = host_settings(tmp_path / f"host-{host}", ("shard-host", *SERVED, *ASKING), log, suffix, host=host,
                             own_topics=True)
    settings.processors["document-rag"].update(
        shards=SHARDS, log_topic=log, use_graph=False, embed_topic=f"embed-{host}-{suffix}",
        prompt_topic=f"prompt-{host}-{suffix}", documents_topic=f"documents-query-w-{suffix}",
        **{f"{name.replace('-query', '').replace('-', '_')}_topic": f"{name}-{suffix}" for name in SERVED})
    settings.processors["shard-host"].update(shards=SHARDS, host_id=host, report_interval_s=0.5, log_topic=log,
                                             data_dir=str(tmp_path / f"host-{host}"))
    for name in SERVED:  # every host serves a shard on the same topic: the shard's, whoever owns it
        settings.processors[name]["topic"] = f"{name}-{suffix}"
        settings.processors[name]["group"] = f"{name}-{suffix}"
    return settings


async def here(client, suffix: str, host: str) -> dict[int, str]:
    r = await client.request(f"shard-host-{host}-{suffix}", ReplicaStatusRequest(), ShardsStatus, timeout=30)
    assert r.error is None, r.error
    return {s.shard: s.here for s in r.shards}


async def until_serving(client, suffix: str, wanted: dict[str, set[int]],
                        kept: dict[str, dict[int, str]] | None = None) -> None:
    """Wait until each host serves exactly the shards given, and keeps the others as ``kept`` says (default:
    not at all): a rebalance takes the broker a moment, and a shard is handed over once its new owner serves it."""
    want = {h: {k: "serving" if k in serving else (kept or {}).get(h, {}).get(k, "") for k in range(SHARDS)}
            for h, serving in wanted.items()}
    seen: dict[str, dict[int, str]] = {}
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(120):
            while seen != want:
                seen = {h: await here(client, suffix, h) for h in wanted}
                if seen != want:
                    await asyncio.sleep(0.1)
    assert seen == want


async def search(client, suffix: str, shard: int, word: str, collection: str, must_see=()) -> list[str]:
    r = await client.request(shard_topic(f"keyword-query-{suffix}", shard), KeywordQueryRequest(
        query=word, collection=collection, limit=50, must_see=list(must_see)), KeywordQueryResponse, timeout=30)
    assert r.error is None, r.error
    return sorted({m.document_id for m in r.matches})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["memory", "kafka"])
async def test_hosts_own_shards_through_the_broker_and_serve_only_theirs(bus_url, open_bus, tmp_path):  # noqa: F811
    suffix, collection = uuid.uuid4().hex[:8], f"c{uuid.uuid4().hex[:8]}"
    log = f"{CHANGELOG_PREFIX}documents-{suffix}"
    writer = host_settings(tmp_path / "ingestion", INGESTION, log, suffix, host="w", own_topics=False)
    for name in ("documents-replica", "documents-query"):
        writer.processors[name]["topic"] = f"{name}-w-{suffix}"
    writer.processors["document-load"]["documents_topic"] = f"documents-query-w-{suffix}"
    docs = [Document(document_id=f"doc-{w}", collection=collection, text=f"All about the {w} and the shore.")
            for w in WORDS]
    bus = await open_bus()
    where = {d.document_id: shard_of(await bus.partition_of(log, document_order(collection, d.document_id)), SHARDS)
             for d in docs}
    assert set(where.values()) == set(range(SHARDS))  # the documents spread over both shards

    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(processors_running(writer, list(INGESTION), bus_url, ready_timeout=120))
        client = await stack.enter_async_context(client_on(bus))
        summary = await ingest(client, docs, timeout=60)
        assert summary.failed == [] and summary.documents == len(docs)

        host_a = contextlib.AsyncExitStack()
        stack.push_async_callback(host_a.aclose)
        await host_a.enter_async_context(processors_running(
            sharded_host(tmp_path, log, suffix, "a"), ["shard-host", *ASKING], bus_url, ready_timeout=120))
        assert await here(client, suffix, "a") == {0: "serving", 1: "serving"}  # ready once it serves them
        for shard in range(SHARDS):
            # Each shard holds its own documents and only those; the ingest's tokens of the other shard's
            # partitions are nothing for it to wait for.
            mine = sorted(d for d, k in where.items() if k == shard)
            assert await search(client, suffix, shard, "shore", collection, summary.seen) == mine
        # document-rag asks both shards and merges: an answer drawn on documents of each.
        asked = await DocumentRagClient(client, topic=f"document-rag-a-{suffix}").ask(
            "what is on the shore?", collection=collection, doc_limit=len(docs), mode="hybrid")
        assert asked.degraded == [] and {where[c.document_id] for c in asked.chunks} == set(range(SHARDS))
        assert {c.document_id for c in asked.chunks} == set(where)

        host_b = processors_running(sharded_host(tmp_path, log, suffix, "b"), ["shard-host"], bus_url,
                                    ready_timeout=120)
        await stack.enter_async_context(host_b)
        await until_serving(client, suffix, {"a": {0}, "b": {1}})  # what a host no longer owns, it does not keep
        for shard in range(SHARDS):
            assert len(await search(client, suffix, shard, "shore", collection)) == list(where.values()).count(shard)

        # A new version of a document reaches the one shard that holds it.
        changed = msgspec.structs.replace(docs[0], text="Now only about the harbour.")
        again = await ingest(client, [changed], timeout=60)
        assert again.failed == []
        shard = where[docs[0].document_id]
        assert await search(client, suffix, shard, "harbour", collection, again.seen) == [docs[0].document_id]
        assert await search(client, suffix, 1 - shard, "harbour", collection, again.seen) == []

        # A host that stops leaves the group at once: the other serves its shard, with what it had kept.
        await host_a.aclose()
        await until_serving(client, suffix, {"b": {0, 1}})
        for shard in range(SHARDS):
            assert len(await search(client, suffix, shard, "shore", collection)) == \
                list(where.values()).count(shard) - (shard == where[docs[0].document_id])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["memory", "kafka"])
async def test_a_standby_keeps_its_shard_caught_up_and_serves_it_when_the_owner_goes(
        bus_url, open_bus, tmp_path):  # noqa: F811
    suffix, collection = uuid.uuid4().hex[:8], f"c{uuid.uuid4().hex[:8]}"
    log = f"{CHANGELOG_PREFIX}documents-{suffix}"
    writer = host_settings(tmp_path / "ingestion", INGESTION, log, suffix, host="w", own_topics=False)
    for name in ("documents-replica", "documents-query"):
        writer.processors[name]["topic"] = f"{name}-w-{suffix}"
    writer.processors["document-load"]["documents_topic"] = f"documents-query-w-{suffix}"
    docs = [Document(document_id=f"doc-{w}", collection=collection, text=f"All about the {w} and the shore.")
            for w in WORDS]
    bus = await open_bus()
    where = {d.document_id: shard_of(await bus.partition_of(log, document_order(collection, d.document_id)), SHARDS)
             for d in docs}

    def host(name: str):
        settings = sharded_host(tmp_path, log, suffix, name)
        settings.processors["shard-host"]["standbys"] = 1
        return processors_running(settings, ["shard-host"], bus_url, ready_timeout=120)

    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(processors_running(writer, list(INGESTION), bus_url, ready_timeout=120))
        client = await stack.enter_async_context(client_on(bus))
        await stack.enter_async_context(host("a"))
        host_b = contextlib.AsyncExitStack()
        stack.push_async_callback(host_b.aclose)
        await host_b.enter_async_context(host("b"))
        await until_serving(client, suffix, {"a": {0}, "b": {1}}, kept={"a": {1: "standby"}, "b": {0: "standby"}})
        # Written while a keeps shard 1 as a standby: its copy follows.
        summary = await ingest(client, docs, timeout=60)
        assert summary.failed == []
        await host_b.aclose()
        await until_serving(client, suffix, {"a": {0, 1}})
        for shard in range(SHARDS):
            mine = sorted(d for d, k in where.items() if k == shard)
            assert await search(client, suffix, shard, "shore", collection, summary.seen) == mine


@pytest.mark.parametrize("backend", ["pulsar"])
async def test_a_sharded_host_on_pulsar_is_refused_saying_why(bus_url, tmp_path):  # noqa: F811
    suffix = uuid.uuid4().hex[:8]
    settings = sharded_host(tmp_path, f"{CHANGELOG_PREFIX}documents-{suffix}", suffix, "a")
    with pytest.raises(ShardingUnsupported, match="needs a bus whose log topics have partitions"):
        async with processors_running(settings, ["shard-host"], bus_url, ready_timeout=120):
            pass


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["memory"])
async def test_status_names_each_shards_owner_and_standbys_as_their_replicas_report(
        bus_url, open_bus, tmp_path, capsys):  # noqa: F811
    suffix = uuid.uuid4().hex[:8]
    log = f"{CHANGELOG_PREFIX}documents-{suffix}"
    bus = await open_bus()

    def host(name: str):
        settings = sharded_host(tmp_path, log, suffix, name)
        settings.processors["shard-host"].update(standbys=1, report_interval_s=0.2)
        return processors_running(settings, ["shard-host"], bus_url, ready_timeout=120)

    async def until_shown(wanted: dict[int, tuple]) -> None:
        """Wait until status shows each shard's (owners, standbys, ready) so: reports come every 0.2 s."""
        shown: dict[int, tuple] = {}
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(120):
                while shown != wanted:
                    shown = {r.shard: ([o.host for o in r.owners], [(s.host, s.caught_up) for s in r.standbys],
                                       r.ready) for r in (await statuses(bus, [])).shards if r.log_topic == log}
                    if shown != wanted:
                        await asyncio.sleep(0.1)
        assert shown == wanted

    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(client_on(bus))
        await stack.enter_async_context(host("a"))
        host_b = contextlib.AsyncExitStack()
        stack.push_async_callback(host_b.aclose)
        await host_b.enter_async_context(host("b"))
        await until_serving(client, suffix, {"a": {0}, "b": {1}}, kept={"a": {1: "standby"}, "b": {0: "standby"}})
        await until_shown({0: (["a"], [("b", True)], True), 1: (["b"], [("a", True)], True)})

        # The command, run in this process (a memory bus is the process's own): a line per shard, its
        # owner caught up with nothing behind, the other host its standby.
        args = build_parser().parse_args(["status", "--bus", bus_url, "--processors", "shard-host"])
        assert await args.run(args) == 0
        lines = [line.split() for line in capsys.readouterr().out.splitlines()]
        table = [line for line in lines if line and line[0] == log]
        assert [line[1:5] + line[7:] for line in table] == [["0", "a", "0", "yes", "b"], ["1", "b", "0", "yes", "a"]]

        # A host that stops removes its replicas' reports: the other owns both shards, with no standby.
        await host_b.aclose()
        await until_shown({0: (["a"], [], True), 1: (["a"], [], True)})
