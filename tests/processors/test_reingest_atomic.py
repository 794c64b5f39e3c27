"""A changed document replaces its chunks in every store, and a concurrent query sees the old version or
the new one, never a mix of both or neither, through the real processors and stores.

Two versions of a document alternate: ``A`` and ``A.upper()``. They cut into the same chunk ids (the
same length, the same breaks) and embed alike (MiniLM reads lowercased text), but every chunk's text
tells which version it is. While they are ingested in turn, query loops ask each store directly and
document-rag (hybrid: faiss and tantivy fused), and every answer must hold the document, in one version.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import msgspec
import pytest

from ragbus.config import pipelines
from ragbus.document_load import as_stored, chunk_document
from ragbus.ingestion import ingest
from ragbus.cli.library import list_documents
from ragbus.runtime.processor import Processor
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import (
    DocEmbeddingsClient,
    DocumentRagClient,
    EmbedClient,
    FetchChunkClient,
    KeywordClient,
)
from ragbus.schema import ChunkMatch, DeleteDocument, Document, EmbeddedChunks, IngestResult
from ragbus.schema import topics as t

from ..helpers.brokers import settings_for_tests
from ..helpers.ingest_pipeline import DOCS, LARGE_ENV, large_text, pipeline

NAMES = tuple(dict.fromkeys((*pipelines.INGEST, *pipelines.QUERY)))

KETTLE = (
    "The Acme kettle warranty lasts two years from the date of purchase. "
    "The warranty covers the heating element, the thermostat and the switch. "
    "It does not cover limescale, dropped kettles or a cracked glass jug. "
    "To claim, send the kettle with its receipt to the Acme service centre in Leeds. "
    "A repaired kettle is returned within ten working days, and a replacement kettle "
    "comes with a fresh warranty of one year from the day it is sent."
)


class Versions:
    """The two versions of one document, and which of them a chunk's text is from."""

    def __init__(self, doc: Document, size: int, overlap: int) -> None:
        self.doc = doc
        self.versions = {"lower": doc, "upper": msgspec.structs.replace(doc, text=doc.text.upper())}
        self.of_text: dict[str, str] = {}
        self.chunks: dict[str, dict[str, str]] = {}
        for name, version in self.versions.items():
            chunks = [as_stored(c) for c in chunk_document(version, size, overlap)]
            self.chunks[name] = {c.chunk_id: c.text for c in chunks}
            self.of_text.update((c.text, name) for c in chunks)
        assert self.chunks["lower"].keys() == self.chunks["upper"].keys()
        assert len(self.of_text) == 2 * len(self.chunks["lower"])  # every chunk tells its version

    def seen(self, matches: list[ChunkMatch]) -> tuple[int, set[str]]:
        """How many of ``matches`` are of this document, and from which versions."""
        mine = [m for m in matches if m.document_id == self.doc.document_id]
        return len(mine), {self.of_text.get(m.text or "", "neither") for m in mine}


class Watch:
    """Query loops running until told to stop; each answer is checked: the document, in one version."""

    def __init__(self, versions: Versions, asks: dict[str, Callable[[], Awaitable[list[ChunkMatch]]]]) -> None:
        self.versions = versions
        self.asks = asks
        self.stop = asyncio.Event()
        self.answers = dict.fromkeys(asks, 0)
        self.bad: list[str] = []
        self._answered = asyncio.Condition()

    async def _loop(self, name: str) -> None:
        while not self.stop.is_set():
            count, seen = self.versions.seen(await self.asks[name]())
            if count == 0 or len(seen) != 1 or "neither" in seen:
                self.bad.append(f"{name}: {count} chunk(s) of the document, versions {sorted(seen)}")
            async with self._answered:
                self.answers[name] += 1
                self._answered.notify_all()

    async def answered_since(self, before: dict[str, int], more: int) -> None:
        """Until every loop has answered ``more`` times since ``before`` (or one went wrong)."""
        async with self._answered:
            await self._answered.wait_for(
                lambda: self.bad or all(self.answers[name] >= before[name] + more for name in before))

    @contextlib.asynccontextmanager
    async def running(self, loops_each: int = 2):
        tasks = [asyncio.ensure_future(self._loop(name)) for name in self.asks for _ in range(loops_each)]
        try:
            yield self
        finally:
            self.stop.set()
            await asyncio.gather(*tasks)


def asks_for(client: RequestClient, question: str, limit: int) -> dict[str, Callable[[], Awaitable[list[ChunkMatch]]]]:
    keyword, faiss = KeywordClient(client, timeout=60), DocEmbeddingsClient(client, timeout=60)
    rag = DocumentRagClient(client, timeout=60)
    vector: list[list[float]] = []

    async def by_keyword():
        return await keyword.query(query=question, limit=limit)

    async def by_vector():
        if not vector:
            vector.extend(await EmbedClient(client, timeout=60).embed([question]))
        return await faiss.query(vector, limit=limit)

    async def by_rag():
        return (await rag.ask(question, mode="hybrid", doc_limit=limit)).chunks

    return {"keyword": by_keyword, "vector": by_vector, "document-rag": by_rag}


async def _alternate(client: RequestClient, versions: Versions, times: int, watch: Watch) -> None:
    """Ingest the versions in turn, ``times`` times, each while queries run against the one before."""
    for i in range(times):
        before = dict(watch.answers)
        summary = await ingest(client, [versions.versions["upper" if i % 2 == 0 else "lower"]], timeout=300)
        assert summary.failed == [] and summary.documents == 1 and summary.unchanged == 0, summary
        await watch.answered_since(before, 2)  # each loop asks again, at least once, of this version


@pytest.mark.parametrize("which", ["memory", "kafka"])
async def test_queries_during_reingests_see_one_whole_version(which, request, tmp_path, monkeypatch):
    # On Kafka a Tansu of its own: the pipeline's groups have the default names, which earlier tests on the
    # session's Tansu joined too (Tansu keeps listing such members, and a CI run's embed group got no partition).
    url = f"memory://{tmp_path.name}" if which == "memory" else request.getfixturevalue("own_kafka_broker").url
    doc = Document(document_id="kettle", title="Kettle warranty", text=KETTLE)
    versions = Versions(doc, 200, 20)
    bus = settings_for_tests()
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=bus, names=NAMES) as client:
        first = await ingest(client, [*DOCS, doc], timeout=120)
        assert first.failed == [] and first.documents == 4
        watch = Watch(versions, asks_for(client, "How long does the kettle warranty last?", 10))
        async with watch.running():
            await _alternate(client, versions, 10, watch)
        assert watch.bad == [], watch.bad[:10]
        assert all(n >= 10 for n in watch.answers.values()), watch.answers


async def test_a_document_in_parts_switches_whole(tmp_path, monkeypatch):
    """A document in parts was visible part by part: after part 0 only its first chunks were there."""
    url = f"memory://{tmp_path.name}"
    doc = Document(document_id="lighthouse", title="lighthouse", text=large_text(100_000))
    versions = Versions(doc, 1000, 150)
    bus = settings_for_tests(max_message_bytes=48_000)
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=bus, extra_env=LARGE_ENV, names=NAMES) as client:
        first = await ingest(client, [*DOCS, doc], timeout=300)
        assert first.failed == [] and first.parts >= 3 + len(DOCS), first
        # The last page is in the last part: it must be there throughout.
        watch = Watch(versions, asks_for(client, "Skarvøy lighthouse keeper Ingrid Solvang", 5))
        async with watch.running(loops_each=1):
            await _alternate(client, versions, 4, watch)
        assert watch.bad == [], watch.bad[:10]


class FlakyKeywordStore(Processor):
    """Passes store writes on to keyword-store, and once armed fails those past ``from_position``."""

    request_type = EmbeddedChunks
    response_type = IngestResult
    client: RequestClient
    from_position: int | None = None

    async def handle(self, request, context):
        if self.from_position is not None and any(c.position >= self.from_position for c in request.chunks):
            raise OSError("disk full")
        result = await self.client.request(t.KEYWORD_STORE, request, IngestResult, timeout=60)
        if result.error is not None:
            raise RuntimeError(result.error.message)
        return result


async def test_a_later_part_that_fails_leaves_the_old_version_whole(tmp_path, monkeypatch):
    from ragbus.config.settings import ProcessorSettings

    url = f"memory://{tmp_path.name}"
    doc = Document(document_id="lighthouse", title="lighthouse", text=large_text(100_000))
    versions = Versions(doc, 1000, 150)
    stores = {"document-load.store_topics": ["doc-embeddings-store", "flaky-keyword-store"]}
    bus = settings_for_tests(max_message_bytes=48_000)
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=bus, extra_env=LARGE_ENV, list_settings=stores,
                        names=NAMES) as client:
        flaky = FlakyKeywordStore("flaky", ProcessorSettings(topic="flaky-keyword-store", group="flaky-keyword-store"))
        flaky.client = client
        stop = asyncio.Event()
        task = asyncio.ensure_future(flaky.run(client.bus, stop))
        try:
            first = await ingest(client, [doc], timeout=300)
            assert first.failed == [] and first.parts >= 3, first
            held = await list_documents(client, "default", timeout=30)
            flaky.from_position = len(versions.chunks["lower"]) - 2  # in the last part
            failed = await ingest(client, [versions.versions["upper"]], timeout=300)
        finally:
            stop.set()
            await task
        assert failed.documents == 0 and "disk full" in failed.failed[0] and "part " in failed.failed[0], failed
        # The old version, every chunk of it, in both stores; the library still lists it.
        fetch = FetchChunkClient(client, timeout=30)
        for chunk_id, text in versions.chunks["lower"].items():
            assert await fetch(chunk_id) == text, chunk_id
        count, seen = versions.seen(await KeywordClient(client, timeout=30).query(query="Skarvøy Solvang", limit=5))
        assert count >= 1 and seen == {"lower"}
        asks = asks_for(client, "Skarvøy lighthouse keeper Ingrid Solvang", 5)
        assert versions.seen(await asks["document-rag"]())[1] == {"lower"}
        assert await list_documents(client, "default", timeout=30) == held
        # Nothing of the failed version is left staged.
        assert [p for p in (tmp_path / "default" / "staged").rglob("*") if p.is_file()] == []


class RelayedDelete(Processor):
    """Passes DeleteDocument on to ``target``; a switch to a new version waits for ``gate``, and sets ``switched``."""

    request_type = DeleteDocument
    response_type = IngestResult

    def __init__(self, name: str, client: RequestClient, target: str) -> None:
        from ragbus.config.settings import ProcessorSettings

        super().__init__(name, ProcessorSettings(topic=name, group=name))
        self.client, self.target = client, target
        self.gate, self.waiting, self.switched = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.gate.set()

    refuse_switch = False

    async def handle(self, request, context):
        if request.activate:
            self.waiting.set()
            await self.gate.wait()
            if self.refuse_switch:
                raise OSError("disk full")
        result = await self.client.request(self.target, request, IngestResult, timeout=60)
        if result.error is not None:
            raise RuntimeError(result.error.message)
        if request.activate:
            self.switched.set()
        return result


QUESTIONS = ["How long does the kettle warranty last?", "Where do I send the kettle with its receipt?",
             "Is limescale covered?", "How long until a repaired kettle is returned?",
             "What warranty does a replacement kettle get?"]


async def test_while_the_stores_hold_different_versions_an_answer_takes_one(tmp_path, monkeypatch):
    """The stores switch one by one: document-rag must not cite faiss's new chunks beside tantivy's old ones."""
    url = f"memory://{tmp_path.name}"
    doc = Document(document_id="kettle", title="Kettle warranty", text=KETTLE)
    versions = Versions(doc, 200, 20)
    deletes = {"document-load.delete_topics": ["relayed-faiss-delete", "relayed-keyword-delete"]}
    async with pipeline(url, tmp_path, monkeypatch, list_settings=deletes, names=NAMES) as client:
        faiss = RelayedDelete("relayed-faiss-delete", client, t.DOC_EMBEDDINGS_DELETE)
        keyword = RelayedDelete("relayed-keyword-delete", client, t.KEYWORD_DELETE)
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(relay.run(client.bus, stop)) for relay in (faiss, keyword)]
        try:
            assert (await ingest(client, [*DOCS, doc], timeout=120)).documents == 4
            keyword.gate.clear()
            faiss.switched.clear()
            switching = asyncio.ensure_future(ingest(client, [versions.versions["upper"]], timeout=120))
            await asyncio.gather(faiss.switched.wait(), keyword.waiting.wait())  # faiss switched, tantivy not yet
            (vector,) = await EmbedClient(client, timeout=30).embed([KETTLE])
            assert versions.seen(await DocEmbeddingsClient(client, timeout=30).query([vector], limit=10))[1] \
                == {"upper"}
            assert versions.seen(await KeywordClient(client, timeout=30).query(query="kettle warranty", limit=10))[1] \
                == {"lower"}
            rag = DocumentRagClient(client, timeout=60)
            for question in QUESTIONS:
                for limit in (2, 3, 4):
                    count, seen = versions.seen((await rag.ask(question, mode="hybrid", doc_limit=limit)).chunks)
                    assert count >= 1 and len(seen) == 1, (question, limit, seen)
            keyword.gate.set()
            assert (await switching).documents == 1
        finally:
            keyword.gate.set()
            stop.set()
            await asyncio.gather(*tasks)


OLD = Document(document_id="old", title="Ferry timetable",
               text="The Skarvøy ferry leaves the harbour at seven in the morning and returns at dusk. "
                    "Bicycles travel free; cars must be booked a day ahead at the harbour office.")


def write_old_format_stores(data_dir, chunks, vectors) -> None:
    """Both stores as a ragbus before versions wrote them: faiss rows of five fields, tantivy without the field."""
    import numpy as np
    import tantivy

    from ragbus.stores.layout import vectors_dir
    from ragbus.keyword import KeywordSettings
    from ragbus.stores.keywords.index import UNVERSIONED_SCHEMA, KeywordIndex
    from ragbus.stores.layout import keywords_dir

    faiss = vectors_dir(data_dir, "default")
    faiss.mkdir(parents=True)
    rows = [[c.chunk_id, c.document_id, c.text, c.title, c.position] for c in chunks]
    meta = {"format": 1, "generation": 1, "dimension": len(vectors[0]), "rows": rows}
    (faiss / "chunks.1.msgpack").write_bytes(msgspec.msgpack.encode(meta))
    np.save(faiss / "vectors.1.npy", np.array(vectors, dtype=np.float32), allow_pickle=False)
    (faiss / "GENERATION").write_text("1\n")
    path = keywords_dir(data_dir, "default")
    path.mkdir(parents=True)
    tantivy.Index(UNVERSIONED_SCHEMA, path=str(path))
    index = KeywordIndex.open_writer(data_dir, "default", KeywordSettings())
    assert not index.versioned
    index.upsert(chunks)
    index.commit()
    index.close()


async def test_stores_written_before_versions_still_load_answer_and_take_a_new_version(tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}"
    chunks = chunk_document(OLD, 200, 20)
    async with pipeline(url, tmp_path / "embed-only", monkeypatch, names=("embed",)) as client:
        vectors = await EmbedClient(client, timeout=60).embed([c.text for c in chunks])
    write_old_format_stores(tmp_path / "data", chunks, vectors)
    question = "When does the Skarvøy ferry leave the harbour?"
    async with pipeline(url, tmp_path / "data", monkeypatch, names=NAMES) as client:
        asks = asks_for(client, question, 5)
        for name, ask in asks.items():
            found = [m for m in await ask() if m.document_id == "old"]
            assert found and found[0].text == chunks[0].text and not found[0].generation, name
        new = msgspec.structs.replace(OLD, text=OLD.text.replace("seven", "eight"))
        summary = await ingest(client, [new], timeout=120)
        assert summary.failed == [] and summary.documents == 1, summary
        for name, ask in asks.items():
            found = [m for m in await ask() if m.document_id == "old"]
            assert found and all("eight" in m.text for m in found[:1]), name
        (listed,) = await list_documents(client, "default", timeout=30)
        assert listed.generation and listed.generation != ""
        assert [m.generation for m in await asks["vector"]()] == [listed.generation] * len(chunks)


async def test_a_switch_that_fails_after_another_store_switched_removes_the_document_everywhere(tmp_path, monkeypatch):
    """No store may serve a version the others do not hold for good: the document goes, and says so."""
    url = f"memory://{tmp_path.name}"
    doc = Document(document_id="kettle", title="Kettle warranty", text=KETTLE)
    versions = Versions(doc, 200, 20)
    deletes = {"document-load.delete_topics": [t.DOC_EMBEDDINGS_DELETE, "relayed-keyword-delete"]}
    async with pipeline(url, tmp_path, monkeypatch, list_settings=deletes, names=NAMES) as client:
        keyword = RelayedDelete("relayed-keyword-delete", client, t.KEYWORD_DELETE)
        stop = asyncio.Event()
        task = asyncio.ensure_future(keyword.run(client.bus, stop))
        try:
            assert (await ingest(client, [*DOCS, doc], timeout=120)).documents == 4
            keyword.refuse_switch = True
            failed = await ingest(client, [versions.versions["upper"]], timeout=120)
        finally:
            stop.set()
            await task
        assert failed.documents == 0 and "disk full" in failed.failed[0], failed
        assert "removed from every store" in failed.failed[0] and "PartlySwitched" in failed.failed[0]
        for name, ask in asks_for(client, "How long does the kettle warranty last?", 10).items():
            if name != "document-rag":
                assert versions.seen(await ask())[0] == 0, name
        assert "kettle" not in [d.document_id for d in await list_documents(client, "default", timeout=30)]


async def test_a_switch_is_sent_with_the_loads_deadline_so_one_delivered_after_it_gives_up_is_dropped(
        tmp_path, monkeypatch):
    """A store write for a load its caller gave up on must not land later (a killed worker's redelivery, a busy
    store) and switch the document after a newer write: every call document-load makes for a load carries the
    load's own deadline, not call_timeout_s (120 s), and a processor drops what reaches it past its deadline."""
    import time

    from ragbus.runtime.envelope import parse_envelope
    from ragbus.runtime.metrics import REGISTRY
    from ragbus.runtime.request_client import RequestTimeout

    url = f"memory://{tmp_path.name}"
    doc = Document(document_id="kettle", title="Kettle warranty", text=KETTLE)
    deletes = {"document-load.delete_topics": [t.DOC_EMBEDDINGS_DELETE, "late-keyword-delete"]}  # nobody there yet
    async with pipeline(url, tmp_path, monkeypatch, list_settings=deletes, names=NAMES) as client:
        started_ms = time.time() * 1000
        try:  # the switch to the late store waits until the load's deadline: the load is not acknowledged
            answered = await client.request(t.DOCUMENT_LOAD, doc, IngestResult, timeout=20)
            assert answered.error is not None, answered
        except RequestTimeout:
            pass
        probe = await client.bus.subscribe("late-keyword-delete", "probe")
        try:
            delivery = await asyncio.wait_for(probe.receive(), 30)
        finally:
            await probe.close()
        switch = msgspec.msgpack.decode(delivery.body, type=DeleteDocument)
        deadline = parse_envelope(delivery.headers).deadline_ms
        assert switch.activate and deadline is not None
        assert deadline <= started_ms + 21_000, (deadline - started_ms) / 1000  # not call_timeout_s's 120 s
        # Delivered now, past that deadline, it is dropped unhandled: the keyword store never switches to it.
        keyword = RelayedDelete("late-keyword-delete", client, t.KEYWORD_DELETE)
        stop = asyncio.Event()
        task = asyncio.ensure_future(keyword.run(client.bus, stop))
        try:
            deadline_s = asyncio.get_running_loop().time() + 60
            while not REGISTRY.get_sample_value("ragbus_expired_total", {"processor": "late-keyword-delete"}):
                assert asyncio.get_running_loop().time() < deadline_s, "the late switch was not dropped"
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await task
        assert not keyword.switched.is_set()
