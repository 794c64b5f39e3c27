"""The scans set (scripts/eval/scans): it parses, every evidence passage is its document's text, the halves
split by document; and the bench's measures on small cases (no file is made, no OCR run here)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from scripts.bench_scans import error_chars, holds, read_converted, table_cells
from scripts.eval import evalset
from scripts.eval.scans_set import CELL_BAR, ScanDocument, Section, document_of, load_documents, load_questions, \
    normalise

DOCS = load_documents()
QUESTIONS = load_questions()


def test_the_set_has_its_documents_each_with_sections_and_most_with_a_table():
    assert len(DOCS) == 16
    for doc in DOCS.values():
        assert doc.title and 2 <= len(doc.sections) <= 5, doc.key
        assert all(s.heading and s.paragraphs for s in doc.sections), doc.key
        for table in doc.tables:
            assert 4 <= len(table) <= 6 and 3 <= len(table[0]) <= 4, doc.key
    assert sum(bool(d.tables) for d in DOCS.values()) >= 12


def test_every_question_is_of_a_document_and_its_evidence_is_verbatim_there():
    per_document = Counter(document_of(q) for q in QUESTIONS)
    assert set(per_document) == set(DOCS)
    assert all(2 <= n <= 3 for n in per_document.values()), per_document
    assert len(QUESTIONS) >= 40
    for q in QUESTIONS:
        text = DOCS[document_of(q)].known_text()
        for passage in q.evidence:
            assert passage in text, (q.id, passage)
    # some answers are a table's row, said as the converters say it
    assert sum(CELL_BAR in p for q in QUESTIONS for p in q.evidence) >= 5


def test_the_halves_split_by_document_half_each():
    halves: dict[str, set[str]] = defaultdict(set)
    for q in QUESTIONS:
        assert q.split == DOCS[document_of(q)].split, q.id
        halves[q.split].add(document_of(q))
    assert set(halves) == set(evalset.SPLITS)
    assert not halves["dev"] & halves["test"]
    assert Counter(d.split for d in DOCS.values()) == {"dev": 8, "test": 8}


def test_normalising_keeps_case_and_reads_bars_quotes_ligatures_and_spaces_alike():
    assert normalise("Door  seal | 1 year\n| 1 year") == "Door seal 1 year 1 year"
    assert normalise("the \ufb01lter\u2019s \u201cseal\u201d \u2013 ok") == "the filter's \"seal\" - ok"
    assert normalise("Motor") != normalise("motor")


def test_character_errors_are_counted_on_the_normalised_texts():
    assert error_chars("Pump | 5 years", "Pump  5 years") == (0, len("Pump 5 years"))
    assert error_chars("Pump | 5 years", "Pump 9 years") == (1, len("Pump 5 years"))
    assert error_chars("abc", "") == (3, 3)


DOC = ScanDocument("t", "T", "dev", (Section("S", ("p",), (("Part", "Cover", "Labour"), ("Motor", "10 years", "2"))),))


@pytest.mark.parametrize(("text", "recovered"), [
    ("Part | Cover | Labour\nMotor | 10 years | 2\n", 6),
    ("x\nMotor | 10 years | 2\nPart Cover Labour", 3),  # a row without its bars is not a table's row
    ("Motor | 10 years 2\nPart | Cover\n| Labour", 3),  # a merged cell is lost, and one on a line of its own
    ("Motor | 2 | 10 years", 2),  # out of order: the longest run in order counts
    ("Part\nCover\nLabour\nMotor\n10 years\n2", 0),
])
def test_table_cells_count_only_cells_said_in_their_row_in_order(text, recovered):
    assert table_cells(DOC, text) == (recovered, 6)


def test_a_chunk_holds_evidence_whole_or_with_an_ocr_slip_but_not_a_shorter_chunk():
    evidence = "Every Northfield dishwasher sold after 1 March 2023 is covered against faults."
    assert holds(evidence, "Intro. Every Northfield dishwasher  sold after 1 March 2023 is covered against faults.")
    assert holds(evidence, "Intro. Every Northfie1d dishwasher sold after l March 2023 is covered against fau1ts.")
    assert not holds(evidence, "Every Northfield dishwasher")
    assert not holds(evidence, "The warranty does not cover damage caused by limescale or by detergents at all.")


def test_a_heading_the_converter_took_out_of_the_text_is_put_back_once(monkeypatch, tmp_path):
    from ragbus.ingestion.convert import Heading, Opened, Page

    pieces = [Page(1, 1), "Title\n", Heading(("The rooms",)), "\nThe rooms differ in size.\n",
              Heading(("Fair use",)), "Fair use\nBook one.\n"]
    opened = Opened("", lambda: iter(pieces))
    monkeypatch.setattr("ragbus.ingestion.convert.convert", lambda path, settings=None: opened)
    read = read_converted([tmp_path / "x.pdf"])
    assert normalise(read.text) == "Title The rooms The rooms differ in size. Fair use Book one."
    assert (read.pages, read.ocr) == (1, 0)


def test_the_title_a_text_layer_took_out_is_put_back_and_a_scans_title_is_not(monkeypatch, tmp_path):
    from ragbus.ingestion.convert import Opened, Page

    def reading(pieces, title):
        monkeypatch.setattr("ragbus.ingestion.convert.convert",
                            lambda path, settings=None: Opened(title, lambda: iter(pieces)))
        return normalise(read_converted([tmp_path / "x.pdf"]).text)

    assert reading([Page(1, 1), "Book one.\n"], "Room Booking") == "Room Booking Book one."
    assert reading([Page(1, 1), "Room Booking\nBook one.\n"], "Room Booking") == "Room Booking Book one."
    assert reading([Page(1, 1), "Room\nBooking\n\nBook one.\n"], "Room Booking") == "Room Booking Book one."
    assert reading([Page(1, 1, ocr=True), "Room Booking\nBook one.\n"], "room_booking") == "Room Booking Book one."
