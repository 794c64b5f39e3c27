"""Uploads to ``ragbus serve`` for real: a PDF, a Word file and a cp1252 text, each sent as a multipart file
to ``POST /v1/documents`` of the command in its own process, then asked about over HTTP.

Each goes to a collection of its own, so an answer that cites anything cites the upload; the PDF and
the Word file are made by ``tests/helpers/documents_made.py`` (the PDF by LibreOffice), as users have them.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from ragbus.testing.stores import build_stores
from ragbus.testing.gateway import GatewayProcess
from ragbus.schema import Document

from ..helpers.documents_made import write_docx, write_pdf

WARRANTY = ("Every Acme kettle carries a warranty of seven years from the date of purchase, covering the heating "
            "element and the thermostat.")
KETTLE = [("How long is the warranty?", [WARRANTY]),
          ("How do I claim?", ["Send the kettle with its receipt to the Acme repair centre in Leeds."])]
BIKES = [("Tyres", ["Inflate the tandem bicycle tyres to four bar before every long ride."])]
CAFE = "Le café de la gare coûte trois euros, soit 3 € le matin.\r\nLe thé coûte deux euros.\r\n"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """The gateway on a data dir whose default collection holds a note already: no first use to wait for."""
    data = tmp_path_factory.mktemp("uploads-data")
    note = Document(document_id="note", text="A note so the default collection is not empty.", collection="default")
    asyncio.run(build_stores(data, "default", [note]))
    log = tmp_path_factory.mktemp("uploads-log") / "serve.log"
    with GatewayProcess(env={"RAGBUS_DATA_DIR": str(data)}, log_path=log) as g:
        yield g


def upload(gateway, name: str, content: bytes, collection: str, media_type: str | None = None) -> dict:
    file = (name, content) if media_type is None else (name, content, media_type)
    r = httpx.post(f"{gateway.url}/v1/documents", files={"file": file}, data={"collection": collection}, timeout=120)
    assert r.status_code == 201, r.text
    return r.json()


def ask(gateway, question: str, collection: str) -> dict:
    r = httpx.post(f"{gateway.url}/v1/ask", json={"question": question, "collection": collection, "mode": "keyword"},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def cited_texts(answer: dict, document_id: str) -> list[str]:
    """The texts of the chunks the answer cites, each checked to be of ``document_id``."""
    by_id = {c["chunk_id"]: c for c in answer["chunks"]}
    assert answer["cited"], answer["answer"]
    for chunk_id in answer["cited"]:
        assert by_id[chunk_id]["document_id"] == document_id and chunk_id.startswith(f"{document_id}#")
    return [by_id[c]["text"] for c in answer["cited"]]


def test_an_uploaded_pdf_is_read_as_ragbus_ingest_reads_it(gateway, tmp_path):
    pdf = write_pdf(tmp_path / "warranty.pdf", "Acme Kettle Warranty", KETTLE)
    stored = upload(gateway, "warranty.pdf", pdf.read_bytes(), "pdf-upload")
    answer = ask(gateway, "How long is the kettle warranty?", "pdf-upload")
    texts = cited_texts(answer, stored["document_id"])
    assert any("seven years" in t for t in texts) and "seven years" in answer["answer"]
    for syntax in ("%PDF", "endobj", "/Type", "stream"):  # the text, not the file's syntax
        assert all(syntax not in t for t in texts) and syntax not in answer["answer"]
    assert all(c["title"].startswith("Acme Kettle Warranty") for c in answer["chunks"])  # the PDF's own title

def test_an_uploaded_word_file_is_read_as_ragbus_ingest_reads_it(gateway, tmp_path):
    docx = write_docx(tmp_path / "bikes.docx", "Tandem Care", BIKES)
    stored = upload(gateway, "bikes.docx", docx.read_bytes(), "docx-upload")
    texts = cited_texts(ask(gateway, "How hard should the tandem tyres be inflated?", "docx-upload"),
                        stored["document_id"])
    assert any("four bar" in t for t in texts)
    assert all("word/document.xml" not in t for t in texts)


def test_an_uploaded_cp1252_text_is_decoded_in_its_own_encoding(gateway):
    content = CAFE.encode("cp1252")
    with pytest.raises(UnicodeDecodeError):
        content.decode("utf-8")  # what the upload would have been refused for
    stored = upload(gateway, "cafe.txt", content, "txt-upload")
    answer = ask(gateway, "Combien coûte le café?", "txt-upload")
    texts = cited_texts(answer, stored["document_id"])
    assert any("Le café de la gare coûte trois euros, soit 3 € le matin." in t for t in texts)
    assert "café" in answer["answer"]


def test_an_upload_without_a_known_suffix_is_read_by_its_media_type(gateway):
    stored = upload(gateway, "faq", b"# Kettles\n\n## Descaling\n\nDescale the kettle with citric acid monthly.\n",
                    "media-type-upload", "text/markdown")
    answer = ask(gateway, "How should a kettle be descaled?", "media-type-upload")
    assert any("citric acid" in t for t in cited_texts(answer, stored["document_id"]))
    assert "## Descaling" not in answer["answer"]  # Markdown: the heading is a section, not a sentence


@pytest.mark.parametrize("name, content, status, kind", [
    ("x.bin", b"\xff\xfe\x00", 415, "UnsupportedFormat"),
    ("broken.pdf", b"%PDF-1.4\nnot a pdf at all", 422, "UnreadableDocument"),
    ("binary.txt", b"text\x00\x01\x02 and bytes", 422, "UnreadableDocument"),
    ("empty.docx", b"", 422, "UnreadableDocument"),
])
def test_a_file_that_cannot_be_read_is_refused_naming_it(gateway, name, content, status, kind):
    r = httpx.post(f"{gateway.url}/v1/documents", files={"file": (name, content)}, data={"collection": "refused"},
                   timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == kind and error["param"] == "file" and error["message"].startswith(f"{name}: ")
    assert "/tmp" not in error["message"] and "ragbus-upload-" not in error["message"]
