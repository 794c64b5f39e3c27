"""Scans, images and PDF tables, read for real: PDFs printed by LibreOffice, scanned here, read by Tesseract."""

from __future__ import annotations

import resource
import time

import pytest

from ragbus.config.settings import ConvertSettings
from ragbus.ingestion import UnreadableDocument, load_documents, open_bytes
from ragbus.ingestion.convert import Page, convert

from ..helpers.documents_made import write_pdf
from ..helpers.scans_made import bomb_png, need_tesseract, pages_of, scanned_pdf, truncated_tiff

SECTIONS = [
    ("Charging", ["Charge the Heron battery for ninety minutes before the first flight.",
                  "A full battery weighs three hundred grams and lasts two hundred cycles."]),
    ("Flying", ["The Heron flies for twenty-two minutes on one charge in calm weather.",
                "Never fly the Heron above one hundred and twenty metres or near airports."]),
]
TABLE = [["Model", "Range", "Price"], ["Heron S", "4 km", "499 euros"], ["Heron X", "9 km", "899 euros"]]
SENTENCES = [s for _, paragraphs in SECTIONS for s in paragraphs]


@pytest.fixture(scope="module")
def manual(tmp_path_factory):
    need_tesseract()
    return write_pdf(tmp_path_factory.mktemp("manual") / "manual.pdf", "Heron Drone Manual", SECTIONS, table=TABLE)


def read(path, settings=None):
    (doc,), skipped = load_documents([str(path)], settings=settings)
    assert skipped == []
    pages: list[Page] = []
    doc.on_page.append(pages.append)
    return doc, "".join(doc.read()), pages


def words(text: str) -> str:
    return " ".join(text.split())


def text_of(opened) -> str:
    """A converter's text, without its page and heading marks."""
    return "".join(piece for piece in opened.read() if isinstance(piece, str))


def test_a_born_digital_pdf_keeps_its_text_layer_and_says_its_table_a_row_a_line(manual):
    doc, text, pages = read(manual)
    assert [p.ocr for p in pages] == [False]
    for sentence in SENTENCES:
        assert sentence in words(text)
    assert "Model | Range | Price\nHeron S | 4 km | 499 euros\nHeron X | 9 km | 899 euros" in text
    assert [s.heading[-1] for s in doc.sections] == ["Charging", "Flying"]
    assert doc.title == "Heron Drone Manual" and "Heron Drone Manual" not in text  # the title, not a line of text


def test_without_an_outline_headings_come_from_font_sizes(tmp_path):
    path = write_pdf(tmp_path / "plain.pdf", "Heron Drone Manual", SECTIONS, outline=False)
    doc, text, _ = read(path)
    assert [s.heading for s in doc.sections] == [("Charging",), ("Flying",)]
    assert text[doc.sections[1].offset:].lstrip().startswith("The Heron flies")
    assert "Heron Drone Manual" not in text  # the title is the document's, not a line of its text
    assert "Charging" not in text and SENTENCES[0] in words(text)


@pytest.mark.parametrize("angle", [1.2, 90, 180])
def test_a_scanned_pdf_its_table_and_its_headings_are_read_by_ocr_whichever_way_up(manual, tmp_path, angle):
    scan = scanned_pdf(manual, tmp_path / "scan.pdf", dpi=300, angle=angle)
    doc, text, pages = read(scan)
    assert [p.ocr for p in pages] == [True]
    for sentence in SENTENCES:
        assert sentence in words(text), (angle, text)
    # Its table a row a line, as the born-digital PDF says it: cells told apart by Tesseract's word boxes
    # (whose reading of a cell may slip by a letter: a rule's edge read as one).
    rows = [line.split(" | ") for line in text.splitlines() if " | " in line]
    assert [len(row) for row in rows] == [3, 3, 3], (angle, text)
    same = sum(got == known for row, known_row in zip(rows, TABLE, strict=True)
               for got, known in zip(row, known_row, strict=True))
    assert same >= 8, (angle, text)
    # A scan has no outline: its sections come from the size of its lines' type, the title's the largest.
    assert [s.heading for s in doc.sections] == [
        ("Heron Drone Manual",), ("Heron Drone Manual", "Charging"), ("Heron Drone Manual", "Flying")]
    assert text[doc.sections[2].offset:].lstrip().startswith("The Heron flies")


def test_a_pdf_half_born_digital_and_half_scanned_is_ocrd_only_where_it_has_no_text(manual, tmp_path):
    import pypdfium2

    scan = scanned_pdf(manual, tmp_path / "scan.pdf")
    both = pypdfium2.PdfDocument(str(manual))
    both.import_pages(pypdfium2.PdfDocument(str(scan)))
    both.save(str(tmp_path / "half.pdf"))
    _, text, pages = read(tmp_path / "half.pdf")
    assert [(p.number, p.pages, p.ocr) for p in pages] == [(1, 2, False), (2, 2, True)]
    assert words(text).count(SENTENCES[0]) == 2


def test_with_ocr_off_a_scan_gives_no_text_and_an_image_is_refused(manual, tmp_path):
    off = ConvertSettings(ocr=False)
    scan = scanned_pdf(manual, tmp_path / "scan.pdf")
    with pytest.raises(UnreadableDocument, match="no text"):
        open_bytes(scan.read_bytes(), filename="scan.pdf", collection="c", document_id="d", settings=off)
    pages_of(manual)[0].save(tmp_path / "page.png")
    docs, skipped = load_documents([str(tmp_path / "page.png")], settings=off)
    assert docs == [] and "[convert] ocr = false" in skipped[0]


def test_images_png_jpeg_and_a_multi_page_tiff_are_documents(manual, tmp_path):
    page = pages_of(manual, angle=-0.8)[0]
    page.save(tmp_path / "page.png", dpi=(300, 300))
    page.convert("RGB").save(tmp_path / "photo.jpg", quality=85)
    page.save(tmp_path / "pages.tiff", save_all=True, append_images=[page.rotate(180)], dpi=(300, 300))
    for name, count in [("page.png", 1), ("photo.jpg", 1), ("pages.tiff", 2)]:
        doc, text, pages = read(tmp_path / name)
        assert [(p.number, p.ocr) for p in pages] == [(n, True) for n in range(1, count + 1)], name
        assert doc.title == name.split(".")[0]
        assert words(text).count(SENTENCES[2]) == count, (name, text)


def test_an_upload_of_an_image_is_read_as_the_file_is(manual, tmp_path):
    page = pages_of(manual)[0]
    page.save(tmp_path / "page.png", dpi=(300, 300))
    uploaded = open_bytes((tmp_path / "page.png").read_bytes(), filename="", media_type="image/png",
                          collection="c", document_id="d")
    assert SENTENCES[1] in words("".join(uploaded.read()))


def test_a_decompression_bomb_is_refused_before_it_is_decoded(tmp_path):
    need_tesseract()
    bomb = bomb_png(tmp_path / "bomb.png")
    assert bomb.stat().st_size < 2_000_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    docs, skipped = load_documents([str(bomb)])
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert docs == [] and "decompression bomb" in skipped[0] and "\n" not in skipped[0], skipped
    assert grown_mb < 200, f"refusing the bomb took {grown_mb:.0f} MB"
    # Under Pillow's own guard but over ours: refused by [convert] max_page_pixels, naming it.
    page = pages_of_blank(tmp_path / "large.png", 4000, 3000)
    docs, skipped = load_documents([str(page)], settings=ConvertSettings(max_page_pixels=10_000_000))
    assert docs == [] and "4,000 x 3,000 pixels" in skipped[0] and "max_page_pixels" in skipped[0]


def pages_of_blank(path, width, height):
    from PIL import Image

    Image.new("L", (width, height), 255).save(path)
    return path


def test_a_corrupt_tiff_is_refused_or_fails_saying_which_page_and_the_next_file_is_read(manual, tmp_path):
    page = pages_of(manual, dpi=150)[0]
    good = tmp_path / "good.png"
    page.save(good, dpi=(150, 150))
    # Cut in its directory of pages: refused when opened, in one line.
    early = truncated_tiff([page, page, page], tmp_path / "early.tiff", keep=0.3)
    # Cut in its last page's pixels: the first pages are read, the last fails its document naming it.
    late = truncated_tiff([page, page, page], tmp_path / "late.tiff", keep=0.9)
    docs, skipped = load_documents([str(early), str(late), str(good)])
    assert len(skipped) == 1 and skipped[0].startswith(f"{early}: not a readable TIFF image file"), skipped
    by_source = {d.source: d for d in docs}
    with pytest.raises(UnreadableDocument, match=r"late\.tiff: page 3 cannot be decoded \(image file is truncated"):
        "".join(by_source[str(late)].read())
    assert SENTENCES[0] in words("".join(by_source[str(good)].read()))


def test_pages_are_read_one_at_a_time_and_too_many_are_refused_before_any(manual, tmp_path):
    first = pages_of(manual, dpi=100)[0]
    pages = 500
    path = tmp_path / "long.pdf"
    first.save(path, save_all=True, append_images=[first] * (pages - 1), resolution=100)
    with pytest.raises(UnreadableDocument, match="500 pages, over the 100 that \\[convert\\] max_pages allows"):
        convert(path, ConvertSettings(max_pages=100))
    # Within the bound, the text comes a page at a time: the first pages are read long before the last.
    started = time.perf_counter()
    seen: list[Page] = []
    reading = convert(path, ConvertSettings(dpi=100)).read()
    for piece in reading:
        if isinstance(piece, Page):
            seen.append(piece)
            if len(seen) == 3:
                break
    reading.close()
    assert [(p.number, p.pages, p.ocr) for p in seen] == [(1, pages, True), (2, pages, True), (3, pages, True)]
    assert time.perf_counter() - started < 300  # generous: three pages, not five hundred


def test_the_memory_of_a_long_pdf_is_that_of_a_few_pages(manual, tmp_path, monkeypatch):
    """Every page of a 500-page scan parsed and its images looked at, OCR left out (seconds a page): what
    Python holds at the last page is what it held at the 50th, where one opening of the file kept every page's
    image (pdfminer.six's object cache) and grew by a page's image each page. Automatic collection is off,
    as good as in a process with a large heap, where full collections come seldom: what pdfminer.six
    leaves in cycles stays unless the converter collects it."""
    import gc
    import tracemalloc

    from ragbus.ingestion.convert import pdf
    from ragbus.ingestion.convert.scan_tables import Block

    first = pages_of(manual, dpi=100)[0]
    path = tmp_path / "long.pdf"
    first.save(path, save_all=True, append_images=[first] * 499, resolution=100)
    monkeypatch.setattr(pdf, "_read_scan",
                        lambda document, index, settings: [Block(f"page {index + 1}", 40.0, 1, 2, False)])
    held: dict[int, int] = {}
    # What the PDF libraries hold, not what the rest of the test session does meanwhile.
    libraries = [tracemalloc.Filter(True, "*/pdfminer/*"), tracemalloc.Filter(True, "*/pdfplumber/*")]
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        for piece in convert(path).read():
            if isinstance(piece, Page) and piece.number in (50, 500):
                traces = tracemalloc.take_snapshot().filter_traces(libraries).statistics("filename")
                held[piece.number] = sum(stat.size for stat in traces)
    finally:
        tracemalloc.stop()
        gc.enable()
    page_bytes = path.stat().st_size / 500
    assert held[500] - held[50] < 20 * page_bytes, (held, page_bytes)


def test_a_language_not_installed_names_its_package(manual, tmp_path):
    scan = scanned_pdf(manual, tmp_path / "scan.pdf", dpi=150)
    with pytest.raises(UnreadableDocument, match="apt-get install tesseract-ocr-chi-sim"):
        text_of(convert(scan, ConvertSettings(language="eng+chi_sim")))


def test_a_page_past_its_time_is_stopped_and_fails_its_document_saying_so(manual, tmp_path):
    scan = scanned_pdf(manual, tmp_path / "scan.pdf")
    with pytest.raises(UnreadableDocument, match=r"page 1: OCR took longer than \[convert\] page_timeout_s"):
        text_of(convert(scan, ConvertSettings(page_timeout_s=0.05)))
    # The process goes on: the next document reads.
    assert SENTENCES[0] in words(text_of(convert(scan)))


def test_a_bad_language_code_is_refused_by_the_settings():
    import msgspec

    for bad in ("eng;rm -rf", "-l", "ENG", "eng++deu", ""):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"language": bad}, ConvertSettings)
