"""The stores' one append-only file: whole frames read, a tail still being written waits, a torn one is cut;
a library written as JSON lines is rewritten as frames."""

from __future__ import annotations

import msgspec
import pytest

from ragbus.schema import DocumentInfo, RecordDocument
from ragbus.stores.append_file import AppendFile
from ragbus.stores.library import Library


class Item(msgspec.Struct):
    n: int


def test_a_reader_reads_whole_frames_and_a_tail_being_written_waits(tmp_path):
    path = tmp_path / "f"
    writer = AppendFile(path, Item)
    writer.open_for_append()
    writer.append(Item(1))
    writer.append(Item(2))
    reader = AppendFile(path, Item)
    assert list(reader.read_new()) == [Item(1), Item(2)]
    whole = path.read_bytes()
    writer.append(Item(3))
    frame = path.read_bytes()[len(whole):]
    path.write_bytes(whole + frame[:-1])  # the last frame half written
    assert list(reader.read_new()) == []
    assert reader.offset == len(whole)
    path.write_bytes(whole + frame)
    assert list(reader.read_new()) == [Item(3)]
    writer.close()


def test_a_writer_opening_the_file_cuts_a_torn_tail_and_appends_after_the_last_whole_frame(tmp_path):
    path = tmp_path / "f"
    first = AppendFile(path, Item)
    first.open_for_append()
    first.append(Item(1))
    first.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b"\x00\x00\x00\x09abc")  # a writer killed mid-append
    second = AppendFile(path, Item)
    assert list(second.read_new()) == [Item(1)]
    second.open_for_append()
    assert path.read_bytes() == whole
    second.append(Item(2))
    second.close()
    assert list(AppendFile(path, Item).read_new()) == [Item(1), Item(2)]


def test_a_frame_that_does_not_decode_ends_the_file_where_it_starts(tmp_path):
    path = tmp_path / "f"
    writer = AppendFile(path, Item)
    writer.open_for_append()
    writer.append(Item(1))
    writer.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b"\x00\x00\x00\x01\xc1")  # 0xc1: never a msgpack value
    again = AppendFile(path, Item)
    assert list(again.read_new()) == [Item(1)]
    again.open_for_append()
    assert path.read_bytes() == whole
    again.close()


def test_a_library_written_as_json_lines_is_rewritten_as_frames_with_every_record(tmp_path):
    path = tmp_path / "c" / "documents.log"
    path.parent.mkdir()
    records = [RecordDocument(document=DocumentInfo(document_id=f"d{i}", collection="c")) for i in range(3)]
    records.append(RecordDocument(document=DocumentInfo(document_id="d1", collection="c"), removed=True))
    lines = b"".join(msgspec.json.encode(r) + b"\n" for r in records)
    path.write_bytes(lines + b'{"document": {"docu')  # and a torn last line
    writer = Library(path)
    writer.open_for_append()
    assert sorted(writer.documents) == ["d0", "d2"]
    assert not path.read_bytes().startswith(b"{")
    writer.append(RecordDocument(document=DocumentInfo(document_id="d3", collection="c")))
    writer.close()
    reader = Library(path)
    reader.catch_up()
    assert sorted(reader.documents) == ["d0", "d2", "d3"]


def test_a_writer_that_appends_nothing_makes_no_file(tmp_path):
    """A store's file existing says the collection holds something (``layout.collections``): opening a
    writer on a new collection, or a removal of nothing, must not make one."""
    path = tmp_path / "c" / "graph" / "log"
    writer = AppendFile(path, Item)
    assert list(writer.read_new()) == []
    writer.open_for_append()
    writer.close()
    assert not path.exists() and not path.parent.exists()
    library = Library(tmp_path / "d" / "documents.log")
    library.open_for_append()
    library.close()
    assert not (tmp_path / "d").exists()


def test_the_writer_of_a_data_dir_rewrites_every_json_lines_library_at_its_start(tmp_path):
    """Readers list an upgraded data dir's documents at once, not after the first write to each collection."""
    from ragbus.stores.library import Libraries

    for collection in ("a", "b"):
        (tmp_path / collection).mkdir()
        record = RecordDocument(document=DocumentInfo(document_id=f"{collection}1", collection=collection))
        (tmp_path / collection / "documents.log").write_bytes(msgspec.json.encode(record) + b"\n")
    writer = Libraries(tmp_path, writer=True)
    writer.open("document-record")
    try:
        reader = Libraries(tmp_path, writer=False)
        assert [sorted(reader.get(c).documents) for c in ("a", "b")] == [["a1"], ["b1"]]
    finally:
        writer.close()


def test_an_append_the_disk_refused_leaves_no_torn_frame_before_the_next(tmp_path):
    path = tmp_path / "f"
    writer = AppendFile(path, Item)
    writer.open_for_append()
    writer.append(Item(1))

    class HalfWritten:  # the disk takes five bytes of the frame, then is full
        def __init__(self, file):
            self.file = file

        def write(self, data):
            self.file.write(data[:5])
            self.file.flush()
            raise OSError(28, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.file, name)

    writer._file = HalfWritten(writer._file)  # type: ignore[assignment]
    with pytest.raises(OSError, match="No space"):
        writer.append(Item(2))
    writer.append(Item(3))
    writer.close()
    assert list(AppendFile(path, Item).read_new()) == [Item(1), Item(3)]
