"""The document stores made from the bus's log: an ingestion host appends, query hosts make their own stores.

On every backend, with nothing shared but the bus: the ingestion host's writers append to the
documents log; each query host runs documents-replica on a data dir of its own and its query
processors read it. A document ingested is searched, fetched and listed on every host; a host
started later has caught up before it says ready; a new version replaces the old one whole; a
delete reaches every host; a host restarted resumes from its checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import msgspec

from ragbus.ingestion import ingest
from ragbus.runtime.worker import processors_running
from ragbus.bus import LogRecord
from ragbus.schema import (
    DeleteDocument,
    EmbeddedChunks,
    DocumentList,
    FetchChunkRequest,
    FetchChunkResponse,
    IngestResult,
    KeywordQueryRequest,
    KeywordQueryResponse,
    ListDocuments,
    RecordDocument,
    decode,
)
from ragbus.schema.changelog import CHUNKS, KIND, RECORD, SWITCH, ReplicaStatus, ReplicaStatusRequest
from ragbus.schema.topics import CHANGELOG_PREFIX

from ..helpers.documents_log import INGESTION, QUERY, bus_url, host_settings  # noqa: F401 (a fixture)
from ..helpers.rag_pipeline import DOCS
from ..helpers.serving import client_on

class Host:
    def __init__(self, client, suffix: str, host: str, collection: str) -> None:
        self.client, self.suffix, self.host, self.collection = client, suffix, host, collection

    def topic(self, name: str) -> str:
        return f"{name}-{self.host}-{self.suffix}"

    async def search(self, query: str, must_see: list[str] | None = None) -> list[str]:
        r = await self.client.request(self.topic("keyword-query"), KeywordQueryRequest(
            query=query, collection=self.collection, must_see=must_see or []), KeywordQueryResponse, timeout=30)
        assert r.error is None, r.error
        return [m.chunk_id for m in r.matches]

    async def texts(self, chunk_ids: list[str]) -> list[str]:
        r = await self.client.request(self.topic("fetch-chunk"), FetchChunkRequest(
            chunk_ids=chunk_ids, collection=self.collection), FetchChunkResponse, timeout=30)
        assert r.error is None, r.error
        return [m.text or "" for m in r.chunks]

    async def documents(self, must_see: list[str] | None = None) -> list[str]:
        r = await self.client.request(self.topic("documents-query"), ListDocuments(
            collection=self.collection, must_see=must_see or []), DocumentList, timeout=30)
        assert r.error is None, r.error
        return [d.document_id for d in r.documents]

    async def status(self) -> ReplicaStatus:
        r = await self.client.request(self.topic("documents-replica"), ReplicaStatusRequest(), ReplicaStatus,
                                      timeout=30)
        assert r.error is None, r.error
        return r


async def test_an_ingestion_host_appends_and_every_query_host_makes_its_own_stores(bus_url, open_bus, tmp_path):  # noqa: F811
    suffix, collection = uuid.uuid4().hex[:8], f"c{uuid.uuid4().hex[:8]}"
    log = f"{CHANGELOG_PREFIX}documents-{suffix}"
    writer = host_settings(tmp_path / "ingestion", INGESTION, log, suffix, host="w", own_topics=False)
    # The ingestion host's own replica and listing are on topics of their own too, so nothing else answers.
    for name in ("documents-replica", "documents-query"):
        writer.processors[name]["topic"] = f"{name}-w-{suffix}"
    writer.processors["documents-replica"]["tombstones"] = True
    writer.processors["document-load"]["documents_topic"] = f"documents-query-w-{suffix}"

    def query_host(host: str):
        return processors_running(host_settings(tmp_path / f"host-{host}", QUERY, log, suffix, host=host,
                                                own_topics=True), list(QUERY), bus_url, ready_timeout=120)

    bus = await open_bus()
    docs = [msgspec.structs.replace(d, collection=collection) for d in DOCS]
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(processors_running(writer, list(INGESTION), bus_url, ready_timeout=120))
        client = await stack.enter_async_context(client_on(bus))
        await stack.enter_async_context(query_host("a"))
        a, b = Host(client, suffix, "a", collection), Host(client, suffix, "b", collection)
        summary = await ingest(client, docs, timeout=60)
        # The latest token of each partition the documents went to: 1 on memory, up to 3 on Kafka's 4.
        assert summary.failed == [] and summary.documents == 3 and 1 <= len(summary.seen) <= 3
        # A read that must see the ingest (its tokens) waits for the host to apply it: no polling.
        assert sorted(await a.documents(must_see=summary.seen)) == ["loops", "slots", "with"]
        assert "loops#0" in await a.search("else clause", must_see=summary.seen)
        assert "else clause of a loop runs" in (await a.texts(["loops#0"]))[0]
        # A host started later has caught up when it says ready: no waiting.
        await stack.enter_async_context(query_host("b"))
        assert "loops#0" in await b.search("else clause")
        assert sorted(await b.documents()) == ["loops", "slots", "with"]
        assert (await b.status()).caught_up
        # A new version replaces the old one whole, on every host.
        changed = msgspec.structs.replace(docs[1], text="The for statement repeats a block. A while loop tests first.")
        again = await ingest(client, [changed], timeout=60)
        assert again.failed == []
        for host in (a, b):
            assert "loops#0" in await host.search("repeats", must_see=again.seen)
            found = await host.search("else clause")
            assert found == [], (found, await host.texts(found))  # nothing of the old version is left
        # A delete reaches every host.
        deleted = await client.request("document-delete", DeleteDocument(document_id="slots", collection=collection),
                                       IngestResult, timeout=60)
        assert deleted.error is None, deleted.error
        assert deleted.seen  # where the log holds the removal: the library's record comes after the stores' switch
        for host in (a, b):
            assert await host.search("__slots__ declaration", must_see=deleted.seen) == []
            assert sorted(await host.documents(must_see=deleted.seen)) == ["loops", "with"]
        # What compaction would keep of the log: each document's live version, of the deleted one its removal.
        problem, deadline = "not read", asyncio.get_running_loop().time() + 30
        while problem and asyncio.get_running_loop().time() < deadline:
            problem = await _what_compaction_keeps_wrongly(bus, log)
            await asyncio.sleep(0.05 if problem else 0)
        assert not problem, f"the tombstones not within 30 s: {problem}"
    # A host restarted resumes from its checkpoint: it reads nothing it had applied.
    async with query_host("a"), client_on(bus) as client:
        a = Host(client, suffix, "a", collection)
        status = await a.status()
        assert status.caught_up and status.read == 0 and status.checkpoint
        assert "loops#0" in await a.search("repeats")




async def _what_compaction_keeps_wrongly(bus, log: str) -> str:
    """What the log, compacted (each key's latest record; none for a key whose latest is a tombstone),
    holds that it should not: of each document only its live version's runs, its state and its record,
    and of "slots" only its removal and the library's record of it (no run: a replica that lagged
    past the compaction still reads the removal). "" when it holds just that."""
    latest: dict[str, LogRecord] = {}
    async with await bus.read_log(log) as reader:
        while not await reader.caught_up():
            record = await asyncio.wait_for(reader.next(), 30)
            latest[record.key] = record
    kept: dict[str, list[LogRecord]] = {}
    for record in latest.values():
        if record.body is not None:
            kept.setdefault(record.key.split("\x1f")[1], []).append(record)
    if set(kept) != {"loops", "slots", "with"}:
        return f"documents kept {sorted(kept)}, keys {sorted(k.replace(chr(31), '/') for k in latest)}"
    for document, records in kept.items():
        kinds = sorted(r.headers[KIND] for r in records)
        switched = [decode(r.body, DeleteDocument).activate for r in records if r.headers[KIND] == SWITCH]
        versions = {c.generation for r in records if r.headers[KIND] == CHUNKS
                    for c in decode(r.body, EmbeddedChunks).chunks}
        removed = [decode(r.body, RecordDocument).removed for r in records if r.headers[KIND] == RECORD]
        if document == "slots":
            wrong = kinds != [RECORD, SWITCH] or switched != [""] or removed != [True]
        else:
            wrong = kinds != [CHUNKS, RECORD, SWITCH] or versions != set(switched) or removed != [False]
        if wrong:
            keys = sorted(r.key.replace(chr(31), "/") for r in records)
            return (f"{document}: kinds {kinds}, runs of versions {sorted(versions)}, switched to {switched},"
                    f" recorded removed {removed}: {keys}")
    return ""
