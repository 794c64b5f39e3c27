"""A generated PDF, Word file, presentation and noisy web page are ingested,
then questions only their content answers are asked, and the answer cites the right chunk.

Every processor is the real one on the memory bus (MiniLM, faiss, tantivy, the extractive prompt).
"""

from __future__ import annotations

import contextlib

from ragbus.config import pipelines
from ragbus.config.settings import load_settings
from ragbus.bus import connect
from ragbus.ingestion import document_id, load_documents
from ragbus.ingestion import ingest
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.typed_clients import DocumentRagClient
from ragbus.runtime.worker import processors_running

from ..helpers.documents_made import NOISY_PAGE, write_docx, write_pdf, write_pptx


@contextlib.asynccontextmanager
async def asking(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBUS_DATA_DIR", str(tmp_path / "data"))
    settings = load_settings(environ={
        "RAGBUS_PROCESSORS__KEYWORD_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__DOC_EMBEDDINGS_QUERY__REFRESH_INTERVAL_S": "0",
        "RAGBUS_PROCESSORS__FETCH_CHUNK__REFRESH_INTERVAL_S": "0",
    })
    url = f"memory://{tmp_path.name}"
    async with (
        processors_running(settings, pipelines.EVERYTHING, url, ready_timeout=120),
        await connect(url) as bus,
        RequestClient(bus, name="test") as client,
    ):
        yield client


async def test_questions_about_a_pdf_a_word_file_a_presentation_and_a_web_page_cite_them(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf = write_pdf(docs / "manual.pdf", "Heron Drone Manual", [
        ("Charging", ["Charge the Heron battery for ninety minutes before its first flight."]),
        ("Flying", ["The Heron flies for twenty-two minutes on one charge, at up to sixty kilometres an hour."]),
    ])
    word = write_docx(docs / "policy.docx", "Travel Policy", [
        ("Hotels", ["Staff on business trips may book hotels costing up to 180 euros a night."]),
        ("Flights", ["Economy class is booked for flights under six hours."]),
    ])
    deck = write_pptx(docs / "launch.pptx", [
        ("Launch plan", ["The Marten scooter launches in Lisbon on 14 March."], "Invite the Lisbon press."),
        ("Pricing", ["The Marten scooter will retail for 899 euros."], ""),
    ])
    page = docs / "warranty.html"
    page.write_text(NOISY_PAGE)
    sources, skipped = load_documents([str(docs)])
    assert skipped == [] and len(sources) == 4
    async with asking(tmp_path, monkeypatch) as client:
        summary = await ingest(client, sources, timeout=120)
        assert summary.failed == [] and summary.documents == 4
        rag = DocumentRagClient(client, timeout=60)
        for question, path, says in [
            ("How long should the Heron battery charge before its first flight?", pdf, "ninety minutes"),
            ("How much may a hotel cost per night on a business trip?", word, "180 euros"),
            ("Where does the Marten scooter launch?", deck, "Lisbon on 14 March"),
            ("How long is the warranty on an Acme kettle?", page, "seven years"),
        ]:
            r = await rag.ask(question, mode="hybrid")
            assert r.error is None and r.cited, (question, r.answer)
            assert r.cited[0].startswith(f"{document_id(path)}#"), (question, r.cited, r.answer)
            assert says in " ".join(r.answer.split()), (question, r.answer)
        # A chunk carries the section it starts in: the page's question heading, searchable though not in its text.
        r = await rag.ask("How long is the warranty?", mode="keyword")
        top = r.chunks[0]
        assert top.document_id == document_id(page) and top.title == "Acme Kettle Warranty › How long is the warranty?"
        assert "How long is the warranty?" not in (top.text or "") and "How long is the warranty?" not in r.answer
        # The page's boilerplate was never indexed, so no answer can cite it.
        r = await rag.ask("Privacy Terms Acme Corp copyright 2024", mode="keyword")
        assert all("Privacy" not in c.text and "©" not in c.text for c in r.chunks if c.text), r.chunks
