"""Scans uploaded to ``ragbus serve`` with ``Accept: application/x-ndjson``: a line per page as it is read by
OCR (here in the gateway, or by document-convert with ``[convert] on_bus``), then the stored body or the error.

The images are pages LibreOffice printed, rendered at 300 dpi (``tests/helpers/scans_made.py``).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from ragbus.schema import Document
from ragbus.testing.gateway import GatewayProcess
from ragbus.testing.stores import build_stores

from ..helpers.documents_made import write_pdf
from ..helpers.scans_made import need_tesseract, pages_of, scan_png, scan_tiff, truncated_tiff

NDJSON = {"Accept": "application/x-ndjson"}
BATTERY = [("Charging", ["Charge the Heron battery for ninety minutes before the first flight."])]
FLYING = [("Flying", ["The Heron flies for twenty-two minutes on one charge in calm weather."])]


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory):
    need_tesseract()
    folder = tmp_path_factory.mktemp("scan-pdfs")
    return (write_pdf(folder / "battery.pdf", "Heron Battery", BATTERY),
            write_pdf(folder / "flying.pdf", "Heron Flying", FLYING))


def serving(tmp_path_factory, name: str, env: dict[str, str]):
    data = tmp_path_factory.mktemp(f"{name}-data")
    note = Document(document_id="note", text="A note so the default collection is not empty.", collection="default")
    asyncio.run(build_stores(data, "default", [note]))
    return GatewayProcess(env={"RAGBUS_DATA_DIR": str(data), **env},
                          log_path=tmp_path_factory.mktemp(f"{name}-log") / "serve.log")


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    """Uploads converted in the gateway's process."""
    with serving(tmp_path_factory, "here", {}) as g:
        yield g


@pytest.fixture(scope="module")
def lane(tmp_path_factory):
    """Uploads converted by document-convert on the bus."""
    with serving(tmp_path_factory, "lane", {"RAGBUS_CONVERT__ON_BUS": "true"}) as g:
        yield g


@pytest.fixture(params=["here", "lane"])
def where(request) -> str:
    return request.param


@pytest.fixture
def gateway(request, where):
    return request.getfixturevalue(where)


def upload_lines(gateway, name: str, content: bytes, collection: str) -> list[dict]:
    """The upload's lines, each parsed as it arrives."""
    with httpx.stream("POST", f"{gateway.url}/v1/documents", files={"file": (name, content)},
                      data={"collection": collection}, headers=NDJSON, timeout=300) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"] == "application/x-ndjson"
        return [json.loads(line) for line in r.iter_lines() if line]


def test_a_png_streams_its_page_then_the_stored_body_and_is_answered(here, pdfs, tmp_path):
    png = scan_png(pdfs[0], tmp_path / "battery.png")
    lines = upload_lines(here, "battery.png", png.read_bytes(), "scan-png")
    assert lines[0] == {"page": 1, "pages": 1, "ocr": True}
    assert len(lines) == 2 and set(lines[1]) == {"stored"}, lines
    stored = lines[1]["stored"]
    assert stored["collection"] == "scan-png" and stored["document_id"].startswith("upload:") and stored["chunks"] >= 1
    asked = httpx.post(f"{here.url}/v1/ask", json={"question": "How long should the Heron battery charge?",
                                                   "collection": "scan-png", "mode": "keyword"}, timeout=120)
    assert asked.status_code == 200, asked.text
    assert "ninety minutes" in asked.json()["answer"]
    assert all(c["document_id"] == stored["document_id"] for c in asked.json()["chunks"])


def test_a_two_page_tiff_streams_pages_one_and_two_in_order(gateway, pdfs, tmp_path):
    tiff = scan_tiff(list(pdfs), tmp_path / "heron.tiff")
    lines = upload_lines(gateway, "heron.tiff", tiff.read_bytes(), "scan-tiff")
    assert lines[:2] == [{"page": 1, "pages": 2, "ocr": True}, {"page": 2, "pages": 2, "ocr": True}]
    assert len(lines) == 3 and lines[2]["stored"]["chunks"] >= 1, lines
    listed = httpx.get(f"{gateway.url}/v1/documents", params={"collection": "scan-tiff",
                                                              "document_id": lines[2]["stored"]["document_id"]})
    assert [d["title"] for d in listed.json()["documents"]] == ["heron.tiff"]


def test_a_tiff_cut_in_its_last_page_streams_the_pages_before_then_the_error_naming_it(gateway, where, pdfs,
                                                                                      tmp_path):
    """Three pages, the third cut short: found after the first page's line (document-convert sends a page
    once it has read it, so the lane tells of fewer pages before the error than the gateway's own reading)."""
    pages = [pages_of(pdf, 150)[0] for pdf in (*pdfs, pdfs[0])]
    tiff = truncated_tiff(pages, tmp_path / "cut.tiff", keep=0.9)
    lines = upload_lines(gateway, "cut.tiff", tiff.read_bytes(), "scan-cut")
    *read, last = lines
    told = {"here": 2, "lane": 1}[where]  # the page being read, or the pages read
    assert read == [{"page": n, "pages": 3, "ocr": True} for n in range(1, told + 1)], lines
    assert set(last) == {"error", "status"} and last["status"] == 422, lines
    error = last["error"]
    assert error["type"] == "UnreadableDocument" and error["param"] == "file"
    assert error["message"].startswith("cut.tiff: page 3 cannot be decoded"), error
    listed = httpx.get(f"{gateway.url}/v1/documents", params={"collection": "scan-cut"})
    assert listed.status_code == 404 or listed.json()["documents"] == [], listed.text


@pytest.mark.parametrize("name, content, status, kind", [
    ("broken.png", b"\x89PNG\r\n\x1a\nnot an image at all", 422, "UnreadableDocument"),
    ("notes.bin", b"\x00\x01", 415, "UnsupportedFormat"),
])
def test_a_file_refused_when_opened_keeps_its_plain_status(gateway, name, content, status, kind):
    r = httpx.post(f"{gateway.url}/v1/documents", files={"file": (name, content)}, data={"collection": "scan-bad"},
                   headers=NDJSON, timeout=120)
    assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
    assert r.json()["error"]["type"] == kind and r.json()["error"]["message"].startswith(f"{name}: ")


def test_a_text_upload_asking_for_lines_gets_the_stored_line_alone(here):
    r = httpx.post(f"{here.url}/v1/documents", headers=NDJSON, timeout=120,
                   json={"text": "Heron propellers are replaced every fifty flights.", "collection": "scan-text"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson", r.text
    (line,) = [json.loads(x) for x in r.text.splitlines()]
    assert line["stored"]["collection"] == "scan-text" and line["stored"]["chunks"] == 1
    forbidden = httpx.post(f"{here.url}/v1/documents", headers=NDJSON, timeout=120,
                           json={"text": "x", "collection": "../up"})
    assert forbidden.status_code == 422 and forbidden.json()["error"]["param"] == "$.collection"
