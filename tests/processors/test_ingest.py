"""Ingest -> query through the real processors: document-load, embed, faiss and tantivy stores.

On the memory bus, and on Kafka and Pulsar against the real brokers.
"""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest

from ragbus.document_load import as_stored, chunk_document
from ragbus.ingestion import DocumentSource, builtin_corpus, load_documents
from ragbus.cli.library import list_collections, list_documents
from ragbus.ingestion import ingest
from ragbus.runtime import metrics
from ragbus.runtime.processor import Processor
from ragbus.runtime.typed_clients import (
    DocEmbeddingsClient,
    EmbedClient,
    FetchChunkClient,
    KeywordClient,
    RemoteError,
)
from ragbus.schema import DeleteDocument, Document, EmbeddedChunks, Fact, IngestResult, LoadTriples
from ragbus.schema import topics as t

from ..helpers.brokers import settings_for_tests
from ..helpers.ingest_pipeline import DOCS, LARGE_ENV, large_text, pipeline


async def _check_ingest_then_query(client):
    summary = await ingest(client, DOCS, timeout=120)
    assert summary.failed == [] and summary.documents == 3 and summary.chunks >= 3
    # The library lists what the stores hold, over this bus.
    listed = await list_documents(client, "default", timeout=30)
    assert [d.document_id for d in listed] == ["exceptions", "loops", "slots"]
    assert sum(d.chunks for d in listed) == summary.chunks and all(d.content_hash.startswith("sha256:") for d in listed)
    assert "default" in await list_collections(client, timeout=30)
    keyword = KeywordClient(client, timeout=30)
    for token, doc in [("__slots__", "slots"), ("7.3.2", "slots"), ("E1101", "exceptions")]:
        matches = await keyword.query(query=token, limit=5)
        assert matches and matches[0].document_id == doc, (token, matches)
    # A paraphrase that shares almost no words with the answer, through the vector path.
    (vector,) = await EmbedClient(client, timeout=30).embed(["How do I repeat something for each item in a list?"])
    matches = await DocEmbeddingsClient(client, timeout=30).query([vector], limit=3)
    assert matches[0].document_id == "loops" and matches[0].text
    assert (await FetchChunkClient(client, timeout=30)(matches[0].chunk_id)) == matches[0].text
    # Deleting a document retracts its graph facts too, through kg-store on this bus.
    facts = LoadTriples(facts=[Fact("E1101", "raised_by", "try statement", source="exceptions"),
                               Fact("E1101", "listed_in", "pylint", source="elsewhere")])
    loaded = await client.request(t.TRIPLES_LOAD, facts, IngestResult, timeout=60)
    assert loaded.error is None and loaded.count == 2
    removed = await client.request(t.DOCUMENT_DELETE, DeleteDocument(document_id="exceptions"), IngestResult,
                                   timeout=60)
    assert removed.error is None and removed.count >= 1 and removed.retracted == 1
    assert [d.document_id for d in await list_documents(client, "default", timeout=30)] == ["loops", "slots"]
    return summary


async def test_ingest_then_query_on_the_memory_bus(tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}"
    async with pipeline(url, tmp_path, monkeypatch) as client:
        await _check_ingest_then_query(client)
        # Idempotent: the same documents again are held already, unchanged, and a
        # changed one replaces its chunks rather than adding to them.
        again = await ingest(client, DOCS, timeout=120)  # the deleted one is stored again, the others held
        assert (again.unchanged, again.documents) == (2, 1)
        embeds = metrics.client_requests.labels(topic=t.EMBED_BULK)._value.get()
        again = await ingest(client, DOCS, timeout=120)
        assert (again.unchanged, again.documents, again.chunks) == (3, 0, 0)
        assert metrics.client_requests.labels(topic=t.EMBED_BULK)._value.get() == embeds  # nothing embedded
        changed = msgspec.structs.replace(DOCS[0], text=DOCS[0].text + " It also saves memory.")
        again = await ingest(client, [changed], timeout=120)
        assert (again.unchanged, again.documents) == (0, 1)
        assert metrics.client_requests.labels(topic=t.EMBED_BULK)._value.get() > embeds
        keyword = KeywordClient(client, timeout=30)
        phrase = [m for m in await keyword.query(query="__slots__ declaration", limit=50) if m.document_id == "slots"]
        word = [m for m in await keyword.query(query="__slots__", limit=50) if m.document_id == "slots"]
        assert len(phrase) == len(word)
        # Deleting a document removes it from both stores.
        removed = await client.request(t.DOCUMENT_DELETE, DeleteDocument(document_id="slots"), IngestResult, timeout=60)
        assert removed.error is None and removed.count >= 1
        assert all(m.document_id != "slots" for m in await keyword.query(query="__slots__", limit=10))
        (vector,) = await EmbedClient(client).embed([DOCS[0].text])
        assert all(m.document_id != "slots" for m in await DocEmbeddingsClient(client).query([vector], limit=10))


async def test_a_chunk_is_stored_with_its_markup_as_plain_text_under_the_ids_of_the_text_as_written(
        tmp_path, monkeypatch):
    marked = " ".join(f"Entry {i}: *key* is looked up with ``d[key]``, see **PEP {i}**. *Fill* {i} pads it."
                      for i in range(12))
    doc = Document(document_id="marked", title="marked", text=marked)
    async with pipeline(f"memory://{tmp_path.name}", tmp_path, monkeypatch) as client:
        summary = await ingest(client, [doc], timeout=120)
        as_cut = chunk_document(doc, 200, 20)  # the pipeline's chunk_size / chunk_overlap
        assert summary.chunks == len(as_cut) > 1
        fetch = FetchChunkClient(client, timeout=30)
        stored = [await fetch(c.chunk_id) for c in as_cut]  # the ids of the text as written
        assert all(text and "*" not in text and "``" not in text for text in stored)
        assert '"d[key]"' in stored[0] and "PEP 0." in stored[0] and "key is looked up" in stored[0]
        assert '"Fill" 0 pads it.' in stored[0]  # a sentence an emphasised word starts still reads as one
        # embedded as written: the nearest chunk to the written text's vector is that chunk
        (vector,) = await EmbedClient(client, timeout=30).embed([as_cut[0].text])
        (best,) = await DocEmbeddingsClient(client, timeout=30).query([vector], limit=1)
        assert best.chunk_id == as_cut[0].chunk_id and best.score == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_ingest_then_query_against_a_real_broker(which, request, tmp_path, monkeypatch):
    url = request.getfixturevalue(f"{which}_broker").url
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=settings_for_tests()) as client:
        await _check_ingest_then_query(client)


class FailingStore(Processor):
    """A store that refuses everything: document-load must then leave no store holding the document."""

    request_type = EmbeddedChunks
    response_type = IngestResult

    async def handle(self, request, context):
        raise OSError("disk full")


async def test_a_failed_store_leaves_no_partial_chunk_set(tmp_path, monkeypatch):
    from ragbus.config.settings import ProcessorSettings

    url = f"memory://{tmp_path.name}"
    stores = {"document-load.store_topics": ["doc-embeddings-store", "failing-store"]}
    async with pipeline(url, tmp_path, monkeypatch, list_settings=stores) as client:
        bus = client.bus
        stop = asyncio.Event()
        failing = asyncio.ensure_future(
            FailingStore("failing", ProcessorSettings(topic="failing-store", group="failing-store")).run(bus, stop)
        )
        summary = await ingest(client, DOCS[:1], timeout=120)
        stop.set()
        await failing
        assert summary.documents == 0 and "disk full" in summary.failed[0]
        (vector,) = await EmbedClient(client).embed([DOCS[0].text])
        assert await DocEmbeddingsClient(client).query([vector], limit=10) == []


def test_reading_files_names_what_is_wrong(tmp_path):
    good = tmp_path / "a.md"
    good.write_text("# Title\n\nSome text.")
    (tmp_path / "b.txt").write_bytes("déjà vu, then a broken byte: \xff".encode().replace(b"\xc3\xbf", b"\xff"))
    (tmp_path / "c.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "d.txt").write_text("   ")
    (tmp_path / "e.html").write_text("<html><title>Page</title><script>x()</script><p>Hello <b>web</b></p></html>")
    docs, failed = load_documents([str(tmp_path), str(tmp_path / "missing.txt")])
    assert sorted(d.title for d in docs) == ["Page", "Title"]
    page = "".join(next(d for d in docs if d.title == "Page").read())
    assert "Hello" in page and "web" in page and "x()" not in page
    reasons = " | ".join(failed)
    assert "not UTF-8" in reasons and "binary" in reasons and "no text" in reasons and "missing.txt" in reasons


def test_the_builtin_corpus_is_the_python_language_reference():
    docs = builtin_corpus("default")
    assert len(docs) >= 70 and sum(len(d.text) for d in docs) > 300_000
    assert any(d.title == "nonlocal" for d in docs)


# --- documents larger than a message ------------------------------------------------------------------


async def test_store_writes_are_split_to_fit_the_bus(tmp_path, monkeypatch):
    """A 300 KB document failed with MessageTooLarge: all its chunks and vectors went to each store at once."""
    url = f"memory://{tmp_path.name}"
    doc = Document(document_id="long", title="long", text=large_text(40_000))
    bus = settings_for_tests(max_message_bytes=200_000)  # the document fits; its ~800 KB of chunks do not
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=bus,
                        extra_env={"RAGBUS_PROCESSORS__EMBED__ONNX__MAX_TOKENS": "32"}) as client:
        summary = await ingest(client, [doc], timeout=300)
        assert summary.failed == [] and summary.documents == 1 and summary.parts == 1
        expected = [as_stored(c) for c in chunk_document(doc, 200, 20)]
        assert summary.chunks == len(expected) > 150
        assert await FetchChunkClient(client, timeout=30)(expected[-1].chunk_id) == expected[-1].text
        matches = await KeywordClient(client, timeout=30).query(query="Skarvøy Solvang", limit=3)
        assert "Solvang" in matches[0].text and matches[0].position >= len(expected) - 3


@pytest.mark.parametrize("which", ["memory", "kafka", "pulsar"])
async def test_a_document_larger_than_a_message_goes_in_parts_with_the_chunk_ids_of_a_whole_one(
        which, request, tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}" if which == "memory" else request.getfixturevalue(f"{which}_broker").url
    doc = Document(document_id=f"big-{uuid.uuid4().hex[:8]}", title="big", text=large_text(150_000))
    bus = settings_for_tests(max_message_bytes=48_000)
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=bus, extra_env=LARGE_ENV) as client:
        summary = await ingest(client, [doc], timeout=300)
        assert summary.failed == [] and summary.documents == 1 and summary.parts >= 3, summary
        expected = [as_stored(c) for c in chunk_document(doc, 1000, 150)]  # the whole document at once
        assert summary.chunks == len(expected)
        fetch = FetchChunkClient(client, timeout=30)
        for chunk in (expected[0], expected[len(expected) // 2], expected[-1]):
            assert await fetch(chunk.chunk_id) == chunk.text, chunk.chunk_id
        with pytest.raises(RemoteError, match="not found"):
            await fetch(f"{doc.document_id}#{len(expected)}")
        matches = await KeywordClient(client, timeout=30).query(query="Skarvøy Solvang lighthouse keeper", limit=3)
        assert matches[0].document_id == doc.document_id and matches[0].position >= len(expected) - 2
        # A new, short version replaces every part of the old one.
        short = Document(document_id=doc.document_id, title="big", text="Now a short note about lighthouses.")
        again = await ingest(client, [short], timeout=120)
        assert again.failed == [] and again.chunks == 1
        with pytest.raises(RemoteError, match="not found"):
            await fetch(expected[-1].chunk_id)


class FailingLaterStore(Processor):
    """A store that takes the first chunks of a document and fails on chunks past ``from_position``."""

    request_type = EmbeddedChunks
    response_type = IngestResult
    from_position = 10**9

    async def handle(self, request, context):
        if any(c.position >= self.from_position for c in request.chunks):
            raise OSError("disk full")
        return IngestResult(count=len(request.chunks))


async def test_a_later_part_that_fails_leaves_no_partial_document(tmp_path, monkeypatch):
    from ragbus.config.settings import ProcessorSettings

    url = f"memory://{tmp_path.name}"
    doc = Document(document_id="big", title="big", text=large_text(150_000))
    expected = chunk_document(doc, 1000, 150)
    stores = {"document-load.store_topics": ["doc-embeddings-store", "failing-store"]}
    bus = settings_for_tests(max_message_bytes=48_000)
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=bus, extra_env=LARGE_ENV,
                        list_settings=stores) as client:
        failing = FailingLaterStore("failing", ProcessorSettings(topic="failing-store", group="failing-store"))
        failing.from_position = len(expected) // 2  # past what the first part holds
        stop = asyncio.Event()
        task = asyncio.ensure_future(failing.run(client.bus, stop))
        summary = await ingest(client, [doc], timeout=300)
        stop.set()
        await task
        assert summary.documents == 0 and "disk full" in summary.failed[0] and "part " in summary.failed[0]
        fetch = FetchChunkClient(client, timeout=30)
        for chunk in (expected[0], expected[len(expected) // 2 - 1]):
            with pytest.raises(RemoteError, match="not found"):
                await fetch(chunk.chunk_id)


async def test_a_document_whose_reading_fails_after_a_part_was_sent_leaves_its_earlier_version(tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}"
    text = large_text(150_000)
    earlier = DocumentSource.of(Document(document_id="breaks", title="breaks", text="The earlier version, whole."))

    def read():
        yield text[:60_000]
        raise OSError("the file changed while it was read")

    source = DocumentSource("breaks", "breaks", "default", "breaks.txt", len(text), read,
                            content_hash="sha256:" + "ab" * 32)
    bus = settings_for_tests(max_message_bytes=48_000)
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=bus, extra_env=LARGE_ENV) as client:
        assert (await ingest(client, [earlier], timeout=300)).documents == 1
        summary = await ingest(client, [source], timeout=300)
        assert summary.documents == 0 and len(summary.failed) == 1
        assert "the file changed" in summary.failed[0] and "already staged were discarded" in summary.failed[0]
        assert await FetchChunkClient(client, timeout=30)("breaks#0") == "The earlier version, whole."


async def test_document_delete_refuses_to_switch_versions(tmp_path, monkeypatch):
    """Switching to a staged version is document-load's step, after every part is staged; never a caller's."""
    url = f"memory://{tmp_path.name}"
    async with pipeline(url, tmp_path, monkeypatch) as client:
        request = DeleteDocument(document_id="any", activate="0123456789abcdef", chunks=1)
        result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=30)
    assert result.error is not None and result.error.type == "BadRequest" and "document-load" in result.error.message
