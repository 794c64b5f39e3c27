"""``ragbus publish-log``: a data dir's stores onto the log, and a new query host made from it.

The source is a data dir as the embedded default writes it (the ingestion pipeline and kg-store
with files, no log). Published onto the memory bus's log topics, a query host with a data dir of
its own (documents-replica, the query processors and kg-query, ``changelog = true``) serves what
the source held: the same documents with their records, chunks, texts and vectors, and the same
graph with its history (``as_of`` a time before the second load sees only the first).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.bus.memory import drop_memory_broker
from ragbus.cli import publish_log
from ragbus.cli.main import main as ragbus
from ragbus.stores.vectors.store import VectorStore
from ragbus.stores.layout import vectors_dir
from ragbus.ingestion import ingest
from ragbus.kg import KgQueryProcessor
from ragbus.kg.settings import KgSettings
from ragbus.runtime.worker import processors_running, put_stores_in
from ragbus.schema import (
    DocEmbeddingsRequest,
    DocEmbeddingsResponse,
    DocumentList,
    Entity,
    Fact,
    FetchChunkRequest,
    FetchChunkResponse,
    IngestResult,
    KeywordQueryRequest,
    KeywordQueryResponse,
    KgQueryRequest,
    KgQueryResponse,
    ListDocuments,
    LoadTriples,
)
from ragbus.schema.times import iso
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.rag_pipeline import DOCS
from ..helpers.serving import client_on, serving

QUERY_HOST = ("documents-replica", "keyword-query", "fetch-chunk", "doc-embeddings-query", "documents-query")


def brown() -> LoadTriples:
    return LoadTriples(
        entities=[Entity(id="Gordon Brown", type="Person"), Entity(id="United Kingdom", type="Country")],
        facts=[Fact("Gordon Brown", "head_of_government_of", "United Kingdom", valid_from="2007-06-27",
                    valid_until="2010-05-11", source="offices", id="uk-pm:brown")],
    )


def cameron() -> LoadTriples:
    return LoadTriples(
        entities=[Entity(id="David Cameron", type="Person")],
        facts=[Fact("David Cameron", "head_of_government_of", "United Kingdom", valid_from="2010-05-11",
                    valid_until="2016-07-13", source="offices-2", id="uk-pm:cameron")],
    )


@pytest.fixture
def bus_url():
    name = f"t{uuid.uuid4().hex[:12]}"
    yield f"memory://{name}"
    drop_memory_broker(name)


async def test_a_published_data_dir_is_what_a_new_query_host_serves(bus_url, tmp_path):
    suffix, collection = uuid.uuid4().hex[:8], f"c{uuid.uuid4().hex[:8]}"
    documents_log, graph_log = f"{CHANGELOG_PREFIX}documents-{suffix}", f"{CHANGELOG_PREFIX}graph-{suffix}"
    source = tmp_path / "source"
    # The source: the embedded default's files.
    settings = load_settings(environ={})
    put_stores_in(settings, source)
    kg_load = settings.processors["kg-store"]["topic"] = f"triples-{suffix}"  # INGEST runs kg-store
    docs = [msgspec.structs.replace(d, collection=collection) for d in DOCS]
    async with (processors_running(settings, list(pipelines.INGEST), bus_url, ready_timeout=120),
                await connect(bus_url) as bus, client_on(bus) as client):
        summary = await ingest(client, docs, timeout=60)
        assert summary.failed == [] and summary.documents == 3
        loaded = await client.request(kg_load, msgspec.structs.replace(brown(), collection=collection),
                                      IngestResult, timeout=60)
        assert loaded.error is None and loaded.count > 0, loaded
        await asyncio.sleep(0.01)
        between = iso(datetime.now(UTC))
        await asyncio.sleep(0.01)
        loaded = await client.request(kg_load, msgspec.structs.replace(cameron(), collection=collection),
                                      IngestResult, timeout=60)
        assert loaded.error is None and loaded.count > 0, loaded
        listed = await client.request("documents-query", ListDocuments(collection=collection), DocumentList,
                                      timeout=30)
    source_records = {d.document_id: d for d in listed.documents}
    source_store = VectorStore(vectors_dir(source, collection), collection, readonly=True, index_cache=False)
    source_chunks = {c.chunk_id: (c, v) for _, chunks, vectors in source_store.documents()
                     for c, v in zip(chunks, vectors, strict=True)}

    async with await connect(bus_url) as bus:
        done = await publish_log.publish_collection(source, collection, bus, documents_topic=documents_log,
                                                    graph_topic=graph_log)
    assert (done.documents, done.chunks, done.graph_batches, done.left_out) == (3, len(source_chunks), 2, [])

    # A query host of its own, made from the log alone.
    host = tmp_path / "host"
    host_settings = load_settings(environ={})
    for name in QUERY_HOST:
        section = host_settings.processors[name]
        section.update(data_dir=str(host), changelog=True, log_topic=documents_log, group=f"{name}-{suffix}",
                       topic=f"{name}-{suffix}")
        if name in ("keyword-query", "fetch-chunk", "doc-embeddings-query"):
            section["refresh_interval_s"] = 0
    kg_query = KgQueryProcessor("kg-query", KgSettings(topic=f"kgq-{suffix}", group=f"kgq-{suffix}",
                                                       data_dir=str(host), changelog=True, log_topic=graph_log))
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(processors_running(host_settings, list(QUERY_HOST), bus_url,
                                                           ready_timeout=120))
        bus = await stack.enter_async_context(await connect(bus_url))
        client = await stack.enter_async_context(client_on(bus))
        await stack.enter_async_context(serving(bus, kg_query))

        listed = await client.request(f"documents-query-{suffix}", ListDocuments(collection=collection),
                                      DocumentList, timeout=30)
        # ingested_at and hashes kept; each entry now says where the log holds the switch to it
        assert all(d.seen.startswith(documents_log + "@") for d in listed.documents), listed.documents
        assert {d.document_id: msgspec.structs.replace(d, seen="") for d in listed.documents} == source_records
        found = await client.request(f"keyword-query-{suffix}", KeywordQueryRequest(
            query="else clause", collection=collection), KeywordQueryResponse, timeout=30)
        assert "loops#0" in [m.chunk_id for m in found.matches]
        texts = await client.request(f"fetch-chunk-{suffix}", FetchChunkRequest(
            chunk_ids=sorted(source_chunks), collection=collection), FetchChunkResponse, timeout=30)
        assert {c.chunk_id: c.text for c in texts.chunks} == {k: c.text for k, (c, _) in source_chunks.items()}
        for chunk_id, (_, vector) in source_chunks.items():
            nearest = await client.request(f"doc-embeddings-query-{suffix}", DocEmbeddingsRequest(
                vectors=[vector.tolist()], collection=collection, limit=1), DocEmbeddingsResponse, timeout=30)
            assert [m.chunk_id for m in nearest.matches] == [chunk_id]

        async def heads(at_time: str, as_of: str | None = None) -> list[str]:
            r = await client.request(f"kgq-{suffix}", KgQueryRequest(
                question="Who was head of government of the United Kingdom?", collection=collection,
                at_time=at_time, as_of=as_of), KgQueryResponse, timeout=30)
            assert r.error is None, r.error
            return sorted(f.head for f in r.facts)

        assert await heads("2008-01-01") == ["Gordon Brown"]
        assert await heads("2012-01-01") == ["David Cameron"]
        # the batches keep the time they were recorded at: before the second load, only the first was known
        assert await heads("2012-01-01", as_of=between) == []
        assert await heads("2008-01-01", as_of=between) == ["Gordon Brown"]


def test_the_command_refuses_a_bus_of_its_own_process(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
    assert ragbus(["publish-log", "--bus", "memory://x"]) == 2
    assert "its log would end with it" in capsys.readouterr().err


def test_the_command_refuses_a_collection_the_data_dir_does_not_hold(tmp_path, capsys, monkeypatch):
    """Refused before any broker is reached (nothing listens on this port): a typo publishes nothing, and says so."""
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
    assert ragbus(["publish-log", "--bus", "kafka://127.0.0.1:9", "--collection", "nothere"]) == 2
    assert capsys.readouterr().err == (f"ragbus publish-log: error: {tmp_path} holds no collection 'nothere' "
                                       "(no library, no graph); it holds: none\n")
