"""document-convert's bookkeeping: parts placed or refused, files removed, pages read and cut into pieces."""

from __future__ import annotations

import pytest

from ragbus.config.settings import ConvertSettings
from ragbus.document_convert import pages as pages_module
from ragbus.document_convert.pages import PageReader, PageText, page_pieces
from ragbus.document_convert.uploads import FileTooLarge, RestartUpload, Uploads
from ragbus.ingestion import page_label
from ragbus.ingestion.convert import Heading, Opened, Page
from ragbus.schema import ConvertPart, Section, encode


def part(n: int, data: bytes, *, last: bool = False, cid: str = "c1", size: int = 0) -> ConvertPart:
    return ConvertPart(conversion_id=cid, filename="scan.pdf", part=n, last=last, data=data, size=size)


@pytest.fixture
def clock():
    now = [0.0]
    return now


@pytest.fixture
def uploads(tmp_path, clock):
    return Uploads(tmp_path, max_file_bytes=100, expire_s=60, clock=lambda: clock[0])


def test_parts_in_order_make_the_file_and_a_part_sent_again_is_not_appended_twice(uploads):
    uploads.add(part(0, b"abc"))
    uploads.add(part(1, b"def"))
    again = uploads.add(part(1, b"def"))  # its answer was lost: the client's resend
    done = uploads.add(part(2, b"g", last=True))
    assert done is again and done.complete and done.received == 7
    assert done.path.read_bytes() == b"abcdefg" and done.path.suffix == ".pdf"


def test_a_part_the_worker_cannot_place_asks_for_a_restart_and_part_0_starts_over(uploads):
    with pytest.raises(RestartUpload, match="part 0"):
        uploads.add(part(2, b"x", cid="unknown"))
    first = uploads.add(part(0, b"abc"))
    with pytest.raises(RestartUpload, match="expected part 1"):
        uploads.add(part(2, b"x"))
    assert not first.path.exists() and "c1" not in uploads.open  # what it had is gone
    restarted = uploads.add(part(0, b"xyz"))
    assert restarted.path.read_bytes() == b"xyz"


def test_a_file_over_the_limit_is_refused_by_its_size_or_by_the_part_that_passes_it(uploads):
    with pytest.raises(FileTooLarge, match="max_file_bytes=100"):
        uploads.add(part(0, b"a", size=101))
    held = uploads.add(part(0, b"a" * 60))
    with pytest.raises(FileTooLarge):
        uploads.add(part(1, b"b" * 41))
    assert not held.path.exists() and uploads.open == {}


def test_a_converted_file_goes_once_no_conversion_reads_it(uploads):
    done = uploads.add(part(0, b"abc", last=True))
    uploads.reading(done)
    uploads.reading(done)  # its last part sent again: converted a second time
    uploads.read(done)
    assert done.path.exists()
    uploads.read(done)
    assert not done.path.exists() and uploads.open == {}


def test_an_abandoned_upload_expires_but_not_one_being_read(uploads, clock):
    abandoned = uploads.add(part(0, b"abc"))
    read = uploads.add(part(0, b"abc", last=True, cid="c2"))
    uploads.reading(read)
    clock[0] = 61
    uploads.sweep()
    assert not abandoned.path.exists() and read.path.exists()
    uploads.read(read)
    assert not read.path.exists()


def test_a_file_name_cannot_leave_the_scratch_folder(uploads, tmp_path):
    placed = uploads.add(ConvertPart(conversion_id="c3", filename="../../etc/passwd/..pdf", data=b"x", last=False))
    assert placed.path.parent.parent == tmp_path and placed.path.name in ("file", "file.pdf")


def test_pages_are_read_one_at_a_time_with_their_headings(monkeypatch, tmp_path):
    pieces = [Page(1, 2), Heading(("One",)), "first ", "page", Page(2, 2, ocr=True), "second", Heading(("Two",))]
    monkeypatch.setattr(pages_module, "convert", lambda path, settings: Opened("T", lambda: iter(pieces)))
    reader = PageReader(tmp_path / "x.pdf", ConvertSettings())
    assert reader.open() == "T"
    assert reader.next_page() == PageText(Page(1, 2), "first page", [Section(0, ["One"])])
    assert reader.next_page() == PageText(Page(2, 2, ocr=True), "second", [Section(6, ["Two"])])
    assert reader.next_page() is None and reader.next_page() is None


def test_a_long_page_is_cut_into_pieces_that_fit_with_its_headings_where_they_fall():
    text = "é" * 3000 + "x" * 3000
    page = PageText(Page(4, 9), text, [Section(0, ["A"]), Section(5000, ["B"]), Section(6000, ["End"])])
    pieces = list(page_pieces(page, 2000))
    assert len(pieces) > 3 and all(len(encode(p)) <= 2000 for p in pieces)
    assert "".join(p.text for p in pieces) == text
    assert [p.continued for p in pieces] == [False] + [True] * (len(pieces) - 1)
    found, start = [], 0
    for p in pieces:
        found.extend((start + s.offset, s.heading) for s in p.sections)
        start += len(p.text)
    assert found == [(0, ["A"]), (5000, ["B"]), (6000, ["End"])]


def test_progress_names_the_page_and_keeps_it_in_a_short_label():
    label = page_label("A very long title of a scanned annual report", Page(3, 12, ocr=True))
    assert label.endswith("page 3 of 12 (OCR)") and len(label) < 50
