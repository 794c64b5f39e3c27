"""Ingest -> query through the real processors: chunker, embed, faiss and tantivy stores.

On the memory bus, and on Kafka and Pulsar against the real brokers.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from config import pipelines
from config.settings import load_settings
from processors.bus import connect
from processors.cli.documents import builtin_corpus, load_documents
from processors.cli.ingest import ingest
from processors.runtime.client import RequestClient
from processors.runtime.clients import DocEmbeddingsClient, EmbedClient, FetchChunkClient, KeywordClient
from processors.runtime.processor import Processor
from processors.runtime.worker import processors_running
from schema import DeleteDocument, Document, EmbeddedChunks, IngestResult
from schema import topics as t

from ..conftest import settings_for_tests

PIPELINE = (*pipelines.INGEST, *pipelines.RETRIEVAL)

DOCS = [
    Document(document_id="slots", title="__slots__",
             text="The __slots__ declaration reserves space for declared variables and prevents the "
                  "automatic creation of __dict__ for each instance. Clause 7.3.2 covers it."),
    Document(document_id="loops", title="for statement",
             text="The for statement iterates over the elements of a sequence such as a string, "
                  "tuple or list. The else clause runs when the loop finishes without break."),
    Document(document_id="exceptions", title="try statement",
             text="The try statement specifies exception handlers and cleanup code. Error E1101 is "
                  "raised here as an example. The finally clause always runs."),
]


@contextlib.asynccontextmanager
async def pipeline(url, data_dir, monkeypatch, *, bus_settings=None, extra_env=None, list_settings=None):
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(data_dir))
    env = {
        "RAGBUS_PROCESSORS__KEYWORD_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__FETCH_CHUNK__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOCUMENT_LOAD__CHUNK_SIZE": "200",
        "RAGBUS_PROCESSORS__DOCUMENT_LOAD__CHUNK_OVERLAP": "20",
        **(extra_env or {}),
    }
    settings = load_settings(environ=env)
    for name, value in (list_settings or {}).items():
        section, key = name.split(".")
        settings.processors[section][key] = value
    if bus_settings is not None:
        settings.bus = bus_settings
    async with processors_running(settings, PIPELINE, url, ready_timeout=120):
        async with await connect(url, bus_settings) as bus, RequestClient(bus, name="test") as client:
            yield client


async def _check_ingest_then_query(client):
    summary = await ingest(client, DOCS, timeout=120)
    assert summary.failed == [] and summary.documents == 3 and summary.chunks >= 3
    keyword = KeywordClient(client, timeout=30)
    for token, doc in [("__slots__", "slots"), ("7.3.2", "slots"), ("E1101", "exceptions")]:
        matches = await keyword.query(query=token, limit=5)
        assert matches and matches[0].document_id == doc, (token, matches)
    # A paraphrase that shares almost no words with the answer, through the vector path.
    (vector,) = await EmbedClient(client, timeout=30).embed(["How do I repeat something for each item in a list?"])
    matches = await DocEmbeddingsClient(client, timeout=30).query([vector], limit=3)
    assert matches[0].document_id == "loops" and matches[0].text
    assert (await FetchChunkClient(client, timeout=30)(matches[0].chunk_id)) == matches[0].text
    return summary


async def test_ingest_then_query_on_the_memory_bus(tmp_path, monkeypatch):
    url = f"memory://{tmp_path.name}"
    async with pipeline(url, tmp_path, monkeypatch) as client:
        summary = await _check_ingest_then_query(client)
        # Idempotent: the same documents again leave the same number of chunks.
        again = await ingest(client, DOCS, timeout=120)
        assert again.chunks == summary.chunks
        keyword = KeywordClient(client, timeout=30)
        assert len([m for m in await keyword.query(query="__slots__ declaration", limit=50) if m.document_id == "slots"]) \
            == len([m for m in await keyword.query(query="__slots__", limit=50) if m.document_id == "slots"])
        # Deleting a document removes it from both stores.
        removed = await client.request(t.DOCUMENT_DELETE, DeleteDocument(document_id="slots"), IngestResult, timeout=60)
        assert removed.error is None and removed.count >= 1
        assert all(m.document_id != "slots" for m in await keyword.query(query="__slots__", limit=10))
        (vector,) = await EmbedClient(client).embed([DOCS[0].text])
        assert all(m.document_id != "slots" for m in await DocEmbeddingsClient(client).query([vector], limit=10))


@pytest.mark.parametrize("which", ["kafka", "pulsar"])
async def test_ingest_then_query_against_a_real_broker(which, request, tmp_path, monkeypatch):
    url = request.getfixturevalue(f"{which}_broker").url
    async with pipeline(url, tmp_path, monkeypatch, bus_settings=settings_for_tests()) as client:
        await _check_ingest_then_query(client)


class FailingStore(Processor):
    """A store that refuses everything: the chunker must then leave no store holding the document."""

    request_type = EmbeddedChunks
    response_type = IngestResult

    async def handle(self, request, context):
        raise OSError("disk full")


async def test_a_failed_store_leaves_no_partial_chunk_set(tmp_path, monkeypatch):
    from config.settings import ProcessorSettings

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
    (tmp_path / "b.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "c.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "d.txt").write_text("   ")
    (tmp_path / "e.html").write_text("<html><title>Page</title><script>x()</script><p>Hello <b>web</b></p></html>")
    docs, failed = load_documents([str(tmp_path), str(tmp_path / "missing.txt")])
    assert sorted(d.title for d in docs) == ["Page", "a"]
    assert "Hello web" in next(d for d in docs if d.title == "Page").text
    reasons = " | ".join(failed)
    assert "not UTF-8" in reasons and "binary" in reasons and "no text" in reasons and "missing.txt" in reasons


def test_the_builtin_corpus_is_the_python_language_reference():
    docs = builtin_corpus("default")
    assert len(docs) >= 70 and sum(len(d.text) for d in docs) > 300_000
    assert any(d.title == "nonlocal" for d in docs)
