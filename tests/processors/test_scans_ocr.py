"""One document of the scans set made for real (LibreOffice prints it, PDFium renders it, a scanner's
turn and noise spoil it) and read back by ``convert()``'s OCR: the bench's machinery end to end, on one page."""

from __future__ import annotations

from scripts.bench_scans import error_chars, read_converted
from scripts.eval.scans_made import make
from scripts.eval.scans_set import load_documents

from ..helpers.documents_made import soffice
from ..helpers.scans_made import need_tesseract


def test_a_300_dpi_scan_of_a_printed_document_reads_back_within_5_percent_of_its_text(tmp_path):
    soffice()
    need_tesseract()
    made = make(tmp_path, only=["warranty"])["warranty"]
    assert set(made.files) >= {"born", "scan300", "scan200", "noisy300", "photo"}
    known = load_documents()["warranty"].known_text()
    read = read_converted(made.files["scan300"])
    assert read.pages == read.ocr == made.pages == 1  # the page is read by OCR: it has no text layer
    distance, length = error_chars(known, read.text)
    assert distance / length < 0.05, read.text
    # the scan is an image: the file has no text layer of its own to read instead
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(made.files["scan300"][0]))
    assert document[0].get_textpage().get_text_range().strip() == ""
    document.close()
