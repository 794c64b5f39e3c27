"""The document library's log and its processors: real files in tmp_path, no mocks."""

from __future__ import annotations

from ragbus.library import DocumentRecordProcessor, DocumentsQueryProcessor, Library, LibrarySettings
from ragbus.stores.layout import library_path
from ragbus.schema import DocumentInfo, ListDocuments, RecordDocument


def info(document_id: str, chunks: int = 1, collection: str = "default") -> DocumentInfo:
    return DocumentInfo(document_id=document_id, title=document_id.upper(), chunks=chunks,
                        content_hash=f"sha256:{document_id}", collection=collection)


async def test_records_are_logged_listed_in_pages_and_removed(tmp_path):
    settings = LibrarySettings(topic="t", group="g", data_dir=str(tmp_path))
    writer, reader = DocumentRecordProcessor("w", settings), DocumentsQueryProcessor("r", settings)
    await writer.start()
    await reader.start()
    try:
        for name in ("/d/c", "/d/a", "/e/b", "/d/b"):
            assert (await writer.handle(RecordDocument(document=info(name)), None)).count == 1
        await writer.handle(RecordDocument(document=info("x", collection="other")), None)
        first = await reader.handle(ListDocuments(collection="default", limit=2), None)
        assert [d.document_id for d in first.documents] == ["/d/a", "/d/b"] and first.more
        assert all(d.ingested_at for d in first.documents)  # stamped by the writer
        rest = await reader.handle(ListDocuments(collection="default", limit=2, after="/d/b"), None)
        assert [d.document_id for d in rest.documents] == ["/d/c", "/e/b"] and not rest.more
        folder = await reader.handle(ListDocuments(collection="default", id_prefix="/d/"), None)
        assert [d.document_id for d in folder.documents] == ["/d/a", "/d/b", "/d/c"]
        one = await reader.handle(ListDocuments(collection="default", document_ids=["/e/b"]), None)
        assert [(d.title, d.content_hash) for d in one.documents] == [("/E/B", "sha256:/e/b")]
        names = (await reader.handle(ListDocuments(collection="default", collections=True), None)).collections
        assert names == ["default", "other"]
        # A later record of an id replaces it; a removal drops it; removing what is not there logs nothing.
        await writer.handle(RecordDocument(document=info("/d/a", chunks=7)), None)
        assert (await writer.handle(RecordDocument(document=info("/d/c"), removed=True), None)).count == 1
        size = library_path(tmp_path, "default").stat().st_size
        assert (await writer.handle(RecordDocument(document=info("/d/c"), removed=True), None)).count == 0
        assert library_path(tmp_path, "default").stat().st_size == size
        listed = (await reader.handle(ListDocuments(collection="default"), None)).documents
        assert [(d.document_id, d.chunks) for d in listed] == [("/d/a", 7), ("/d/b", 1), ("/e/b", 1)]
    finally:
        await writer.close()
        await reader.close()


def test_a_torn_last_line_is_waited_for_by_readers_and_cut_by_the_next_writer(tmp_path):
    path = library_path(tmp_path, "default")
    writer = Library(path)
    writer.open_for_append()
    writer.append(RecordDocument(document=info("/a")))
    with path.open("ab") as fh:
        fh.write(b'{"document": {"document_id": "/b"')  # a writer that died mid-line
    reader = Library(path)
    reader.catch_up()
    assert list(reader.documents) == ["/a"]
    again = Library(path)
    again.open_for_append()
    again.append(RecordDocument(document=info("/c")))
    reader.catch_up()
    assert sorted(reader.documents) == ["/a", "/c"]
