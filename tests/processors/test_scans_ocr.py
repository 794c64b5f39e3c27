"""One document of the scans set made for real (LibreOffice prints it, PDFium renders it, a scanner's
turn and noise spoil it) and read by Tesseract: the bench's machinery end to end, on one page."""

from __future__ import annotations

from scripts.bench_scans import error_chars, read_tesseract
from scripts.eval.scans_made import make
from scripts.eval.scans_set import load_documents

from ..helpers.documents_made import soffice
from ..helpers.scans import tesseract


def test_a_300_dpi_scan_of_a_printed_document_reads_back_within_5_percent_of_its_text(tmp_path):
    soffice()
    tesseract()
    made = make(tmp_path, only=["warranty"])["warranty"]
    assert set(made.files) >= {"born", "scan300", "scan200", "noisy300", "photo"}
    known = load_documents()["warranty"].known_text()
    read = read_tesseract(made.files["scan300"], 300)
    assert read.pages == made.pages == 1
    distance, length = error_chars(known, read.text)
    assert distance / length < 0.05, read.text
    # the scan is an image: the file has no text layer of its own to read instead
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(made.files["scan300"][0]))
    assert document[0].get_textpage().get_text_range().strip() == ""
    document.close()
