"""End to end: a document larger than one message, ingested in parts, then asked about its last page.

Any document over about 200 KB of text once failed to ingest. Here a
~1.3 MB document goes through the real processors on the memory bus with the
default ``max_message_bytes`` (1 MB): it travels in two parts, and
document-rag's answer about its last page cites a chunk from there. A 20 MB
file is measured by ``python -m scripts.bench_large_document`` (minutes of embedding on 2 cores).
"""

from __future__ import annotations

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.document_load import chunk_document
from ragbus.ingestion import ingest
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.worker import processors_running
from ragbus.schema import Document

from ..helpers.ingest_pipeline import large_text


async def test_a_document_over_a_message_is_ingested_whole_and_its_last_page_is_cited(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path))
    settings = load_settings(environ={
        "RAGBUS_PROCESSORS__KEYWORD_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__FETCH_CHUNK__REFRESH_INTERVAL_S": "0",
        # MiniLM on a short window: ~1,500 chunks in seconds rather than minutes on 2 cores.
        "RAGBUS_PROCESSORS__EMBED__ONNX__MAX_TOKENS": "32",
    })
    assert settings.bus.max_message_bytes == 1_000_000  # the default: the document is larger
    doc = Document(document_id="manual", title="manual", text=large_text(1_300_000))
    url = f"memory://{tmp_path.name}"
    async with (
        processors_running(settings, pipelines.EVERYTHING, url, ready_timeout=120),
        await connect(url, settings.bus) as bus,
        RequestClient(bus, name="test") as client,
    ):
        summary = await ingest(client, [doc], timeout=600)
        expected = chunk_document(doc, 1000, 150)
        assert summary.failed == [] and summary.parts >= 2 and summary.chunks == len(expected)
        r = await DocumentRagClient(client, timeout=60).ask(
            "Who was the last keeper of the Skarvøy lighthouse?", mode="hybrid"
        )
    last_page = {c.chunk_id for c in expected if "Solvang" in c.text}
    assert last_page and all(int(i.split("#")[1]) >= len(expected) - 2 for i in last_page)
    assert r.error is None and set(r.cited) & last_page, (r.cited, r.answer)
    assert "Ingrid Solvang" in r.answer
