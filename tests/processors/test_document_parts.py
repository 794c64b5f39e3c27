"""The sender side of large documents: a file streamed in parts that each fit the bus, in bounded memory.

Document-load's side is stood in for by ``split_part`` itself (a stub client), so a 20 MB file
takes seconds; ``tests/processors/test_ingest.py`` runs the real processors on every backend.
"""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

from ragbus.document_load.chunking import split_part, split_text
from ragbus.ingestion import load_documents
from ragbus.ingestion import ingest, send_document
from ragbus.schema import IngestResult, encode

SENTENCE = "The quick brown fox jumps over the lazy dog while the lighthouse keeper logs ship {i}. "


class ChunkingClient:
    """Answers document-load as document-load would, checking each part against the bus limit."""

    def __init__(self, max_message_bytes: int, size: int = 1000, overlap: int = 150) -> None:
        self.bus = SimpleNamespace(max_message_bytes=max_message_bytes)
        self.size, self.overlap = size, overlap
        self.chunks = 0  # counted, not kept: the test measures the sender's memory
        self.parts: list[tuple[int, bool, int]] = []  # part, last, first_position
        self.largest = 0

    async def request(self, topic, message, response_type, *, timeout):
        body = len(encode(message))
        assert body <= self.bus.max_message_bytes - 4096, f"part {message.part} is {body} bytes"
        self.largest = max(self.largest, body)
        assert message.first_position == self.chunks
        self.parts.append((message.part, message.last, message.first_position))
        pieces, resume_at = split_part(
            message.text, self.size, self.overlap, first=message.part == 0, last=message.last
        )
        self.chunks += len(pieces)
        return IngestResult(count=len(pieces), resume_at=resume_at)


def write_text(path, chars: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < chars:
            line = SENTENCE.format(i=i) + ("\n\n" if i % 7 == 6 else "") + ("Øre é ü. " if i % 13 == 0 else "")
            f.write(line)
            written += len(line)
            i += 1


async def test_a_20_mb_file_streams_in_parts_that_fit_within_bounded_memory(tmp_path):
    path = tmp_path / "big.txt"
    write_text(path, 20_000_000)
    expected = len(split_text(path.read_text(encoding="utf-8"), 1000, 150))
    (source,), failed = load_documents([str(path)])
    assert failed == []
    client = ChunkingClient(max_message_bytes=1_000_000)
    tracemalloc.start()
    try:
        sent = await send_document(client, source, timeout=60)
        chunks, parts = sent.chunks, sent.parts
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert chunks == expected == client.chunks
    assert parts == len(client.parts) >= 20
    assert client.parts[-1][1] and not any(last for _, last, _ in client.parts[:-1])
    assert client.largest > 900_000  # parts are filled, not trickled
    # A part's text, its message and a block being read: a few MB, never the 20 MB (or several copies of it).
    assert peak < 8_000_000, f"peak {peak / 1e6:.1f} MB while sending a 20 MB file"


async def test_progress_is_shown_per_part(tmp_path):
    path = tmp_path / "big.txt"
    write_text(path, 400_000)
    (source,), _ = load_documents([str(path)])
    shown = []
    summary = await ingest(ChunkingClient(max_message_bytes=100_000), [source],
                           on_progress=lambda done, total, label: shown.append((done, total, label)))
    assert summary.failed == [] and summary.parts >= 4
    parts = [label for done, _, label in shown if done == 0]
    assert parts[0].startswith("big part 2 (") and parts[-1].startswith(f"big part {summary.parts} (")
    assert len(parts) == summary.parts - 1 and shown[-1] == (1, 1, "big")


def test_a_bad_byte_deep_in_a_file_is_reported_before_anything_is_sent(tmp_path):
    path = tmp_path / "bad.txt"
    good = ("fine text, déjà vu. " * 100_000).encode()  # UTF-8 beyond ASCII: a broken UTF-8 file, not another encoding
    path.write_bytes(good + b"\xff" + b" more")
    docs, failed = load_documents([str(path)])
    assert docs == [] and failed == [f"{path}: not UTF-8 (invalid start byte at byte {len(good)})"]


class TitlingClient(ChunkingClient):
    """Keeps each chunk's title as document-load gives it, from the sections each part carries."""

    def __init__(self, max_message_bytes: int) -> None:
        super().__init__(max_message_bytes, size=200, overlap=20)
        self.titles: list[tuple[str, str]] = []

    async def request(self, topic, message, response_type, *, timeout):
        from ragbus.document_load.chunking import chunk_part

        result = await super().request(topic, message, response_type, timeout=timeout)
        chunks, _ = chunk_part(message, self.size, self.overlap)
        self.titles.extend((c.title, c.text) for c in chunks)
        return result


async def test_each_chunk_carries_its_section_however_the_document_was_cut_into_parts(tmp_path):
    """Headings are structure: each chunk is titled with the section it starts in, the same titles whether the
    document was sent whole or in parts."""
    path = tmp_path / "guide.md"
    sections = [f"Chapter {n}" for n in range(60)]
    path.write_text("# Ferry Guide\n\n" + "".join(
        f"## {name}\n\n" + f"Ferry {i} of {name.lower()} sails at dawn and returns at dusk. " * 30 + "\n\n"
        for i, name in enumerate(sections)
    ))
    (source,), _ = load_documents([str(path)])
    whole, parts = TitlingClient(max_message_bytes=1_000_000), TitlingClient(max_message_bytes=40_000)
    await send_document(whole, source, timeout=60)
    await send_document(parts, source, timeout=60)
    assert len(parts.parts) >= 3 and len(whole.parts) == 1
    assert parts.titles == whole.titles
    full = "".join(source.read())
    assert len(source.sections) == 61  # the title, then every chapter
    for title, text in whole.titles:
        at = full.find(text)  # a repeated text repeats within one chapter only
        (heading,) = [s.heading for s in source.sections if s.offset <= at][-1:]
        assert title == " › ".join(dict.fromkeys(("Ferry Guide", *heading))), (title, text[:60])
    assert {t for t, _ in whole.titles} == {f"Ferry Guide › Chapter {n}" for n in range(60)}
