"""Headings on scanned pages from the size of their type: Tesseract's hOCR read, a paragraph parted where
its type changes size, short large lines made headings at levels by size. The same on real scans is in
tests/processors/test_scans.py."""

from __future__ import annotations

from ragbus.ingestion.convert import Heading
from ragbus.ingestion.convert.hocr import words
from ragbus.ingestion.convert.scan_headings import ScanHeadings
from ragbus.ingestion.convert.scan_tables import Block, page_blocks

HOCR = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
    "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <body>
  <div class='ocr_page' id='page_1' title='bbox 0 0 2550 3301'>
   <div class='ocr_carea' id='block_1_1' title="bbox 400 300 1900 700">
    <p class='ocr_par' id='par_1_1' lang='eng' title="bbox 400 300 1900 700">
     <span class='ocr_header' id='line_1_1' title="bbox 400 300 900 360; baseline 0 -10; x_size 58; x_descenders 12">
      <span class='ocrx_word' id='word_1_1' title='bbox 400 300 600 360; x_wconf 96'>Fish</span>
      <span class='ocrx_word' id='word_1_2' title='bbox 630 300 900 360; x_wconf 96'>&amp; chips</span>
     </span>
     <span class='ocr_line' id='line_1_2' title="bbox 400 400 1900 450; baseline 0 -10; x_size 45">
      <span class='ocrx_word' id='word_1_3' title='bbox 400 400 560 450; x_wconf 95'>Serve</span>
      <span class='ocrx_word' id='word_1_4' title='bbox 580 400 700 450; x_wconf 95'>hot.</span>
     </span>
    </p>
   </div>
   <div class='ocr_separator' id='block_1_2' title="bbox 400 800 2000 820"></div>
   <div class='ocr_carea' id='block_1_3' title="bbox 400 900 1900 950">
    <p class='ocr_par' id='par_1_2' lang='eng' title="bbox 400 900 1900 950">
     <span class='ocr_line' id='line_1_3' title="bbox 400 900 1900 950; baseline 0 -10; x_size 46">
      <span class='ocrx_word' id='word_1_5' title='bbox 400 900 560 950; x_wconf 95'>Salt</span>
      <span class='ocrx_word' id='word_1_6' title='bbox 580 900 700 950; x_wconf 95'>well.</span>
     </span>
    </p>
   </div>
  </div>
 </body>
</html>"""


def test_hocr_gives_the_tsv_columns_and_each_words_line_size():
    data = words(HOCR)
    assert data["text"] == ["Fish", "& chips", "Serve", "hot.", "Salt", "well."]
    assert data["size"] == [58.0, 58.0, 45.0, 45.0, 46.0, 46.0]
    assert data["block_num"] == [1, 1, 1, 1, 2, 2] and data["line_num"] == [1, 1, 2, 2, 1, 1]
    assert (data["left"][1], data["top"][1], data["width"][1], data["height"][1]) == (630, 300, 270, 60)


def test_a_line_of_larger_type_parts_from_the_paragraph_tesseract_put_it_in():
    blocks = page_blocks(words(HOCR))
    assert [(b.text, b.size, b.lines) for b in blocks] == [("Fish & chips", 58.0, 1), ("Serve hot.", 45.0, 1),
                                                           ("Salt well.", 46.0, 1)]


def body(text: str = "The keeper climbs the tower at dusk and lights the lamp.", size: float = 45.0) -> Block:
    return Block(text, size, 2, len(text.split()), False)


def line(text: str, size: float) -> Block:
    return Block(text, size, 1, len(text.split()), False)


def test_short_lines_of_larger_type_head_sections_at_levels_by_size():
    headings = ScanHeadings()
    page = [line("Keeper's Log", 105.0), body(), line("Lamps", 66.0), body(), line("Wicks", 58.0), body(),
            line("Oil", 65.0), body()]
    pieces = list(headings.pieces(page, first=True))
    assert [p.path for p in pieces if isinstance(p, Heading)] == [
        ("Keeper's Log",), ("Keeper's Log", "Lamps"), ("Keeper's Log", "Lamps", "Wicks"),
        ("Keeper's Log", "Oil")]  # 65 and 66 are one level; 58 the one under it
    text = "".join(p for p in pieces if isinstance(p, str))
    assert "Lamps" not in text and text.count("The keeper climbs") == 4


def test_body_sized_lines_long_lines_rows_and_paragraphs_of_several_lines_are_not_headings():
    headings = ScanHeadings()
    page = [body(), line("Only a little larger", 49.0), line(" ".join(["word"] * 16), 60.0),
            line("A line of a sentence set large, ending it.", 60.0),
            Block("Model | Price", 60.0, 1, 2, True), Block("Two lines\nof large type", 60.0, 2, 5, False),
            line("1914", 60.0), body()]
    assert not [p for p in headings.pieces(page) if isinstance(p, Heading)]


def test_the_documents_title_on_its_first_page_is_not_a_section():
    headings = ScanHeadings(title="Keeper's Log")
    page = [line("Keeper's Log", 105.0), body(), line("Lamps", 58.0), body()]
    assert [p.path for p in headings.pieces(page, first=True) if isinstance(p, Heading)] == [("Lamps",)]


def test_the_body_size_counts_every_paragraphs_words():
    """Three short paragraphs at the body's size outweigh a heading's two words, though each has fewer."""
    page = [line("Yes.", 45.0), line("Nine.", 45.0), line("Done.", 45.0), line("Big lamps", 58.0)]
    assert [p.path for p in ScanHeadings().pieces(page) if isinstance(p, Heading)] == [("Big lamps",)]
