"""Sending documents through the bus to be chunked, embedded and stored: what every client of ingestion calls.

Document-load does the work; this side reads each document's text, keeps a few
documents in flight and reports each failure with its document, going on with the rest.

A document larger than one message goes in parts (the protocol is in ``schema/ingest.py``): each
part fills what the bus's ``max_message_bytes`` leaves after headers and the document's other
fields, the next is read and sent once document-load says where it must begin, so a file of any size
streams through in bounded memory. If sending stops after a part was stored (a time-out, a file that
changed under us), the document is removed again rather than left half stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from ragbus.config.settings import ClientSettings
from ragbus.bus.positions import latest
from ragbus.runtime.request_client import RequestClient
from ragbus.runtime.sizing import body_budget
from ragbus.schema import DeleteDocument, Document, IngestResult, Section, Superseded, encode, parts_generation
from ragbus.schema import topics as t
from ragbus.schema.document_ids import check_document_id

from .errors import DocumentRejected
from .convert import Page
from .remote import convert_on_bus
from .sources import DocumentSource

# What a part's fields may grow by over the empty one sized below: the text's msgpack prefix
# (up to 5 bytes), and ``part`` and ``first_position`` (up to 9 bytes each).
_GROWTH = 5 + 9 + 9


@dataclass
class IngestSummary:
    documents: int = 0  # stored now (unchanged ones not counted)
    chunks: int = 0
    parts: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unchanged: int = 0  # held already with the same content hash: neither chunked nor embedded again
    # Being sent when the run was cancelled (Ctrl-C): not stored, parts of their new version may be staged.
    interrupted: list[DocumentSource] = field(default_factory=list)
    # With stores from the log: where it holds the documents stored, the latest token of each partition;
    # an ask that must see them carries them (``DocumentRagRequest.must_see``), and each replica answers
    # once it applied them.
    seen: list[str] = field(default_factory=list)
    # Stored, but another writer's version of the document came after and is served instead: one line each.
    superseded: list[str] = field(default_factory=list)


def superseded_by(superseded: Superseded) -> str:
    """What a writer is told when another writer's version of its document is served instead of its own."""
    what = f"version {superseded.generation}" if superseded.generation else "its removal"
    where = f" (written at {superseded.seen})" if superseded.seen else ""
    return f"stored, then superseded by another writer's {what}{where}, which is what is served"


class Sent(NamedTuple):
    chunks: int  # chunks stored (or held, when unchanged)
    parts: int  # parts sent
    unchanged: bool = False  # the stores held this content already: nothing was stored
    seen: tuple[str, ...] = ()  # with stores from the log: where they hold it (a read that must see it carries it)
    # Another writer's version of the document came after this one and is served instead.
    superseded: Superseded | None = None


def page_label(label: str, page: Page) -> str:
    """What progress says while a paged document is read: its title, shortened so a progress bar's label
    keeps the page, then "page k of n" (and whether OCR reads it)."""
    short = label if len(label) <= 24 else label[:23] + "…"
    return f"{short} page {page.number} of {page.pages}{' (OCR)' if page.ocr else ''}"


def _fill(buffer: str, blocks: Iterator[str], room: int) -> tuple[str, bool]:
    """``buffer`` plus blocks until it holds ``room`` characters (so at least ``room`` bytes); and whether
    the text ended."""
    pieces, held = [buffer], len(buffer)
    while held < room:
        block = next(blocks, None)
        if block is None:
            return "".join(pieces), True
        pieces.append(block)
        held += len(block)
    return "".join(pieces), False


def _fitting(text: str, room: int) -> int:
    """How many characters of ``text`` take at most ``room`` bytes in UTF-8."""
    if len(text) * 4 <= room:
        return len(text)
    head = text[:room]
    if head.isascii():  # a byte a character: no need to encode
        return len(head)
    return len(head.encode()[:room].decode("utf-8", "ignore"))


async def send_document(
    client: RequestClient,
    doc: DocumentSource,
    *,
    timeout: float,
    on_part: Callable[[int, int], None] | None = None,
) -> Sent:
    """Send ``doc`` to document-load in parts that fit the bus; returns chunks stored and parts sent,
    or that the stores hold this content already (its hash is the library's).

    Each part waits at most ``timeout``. ``on_part(characters done, parts done)`` follows a
    document of several parts. Raises ``DocumentRejected`` for an error answer, else what
    went wrong (a time-out, a read error), after discarding what was staged of this version (an earlier one stays).
    An id holding a control character is refused here, before anything is sent (``BadRequest``).
    """
    check_document_id(doc.document_id)
    if doc.on_bus is not None:  # a PDF or an image for document-convert: its text first
        doc = await convert_on_bus(client, doc, timeout=timeout)
    empty = Document(
        document_id=doc.document_id, text="", title=doc.title, collection=doc.collection, source=doc.source,
        content_hash=doc.content_hash,
    )
    room = body_budget(client.bus.max_message_bytes) - len(encode(empty)) - _GROWTH
    if room < 1:
        raise ValueError(f"max_message_bytes={client.bus.max_message_bytes} leaves no room for text after its id")
    blocks = doc.read()
    buffer, ended, part, position, done = "", False, 0, 0, 0
    try:
        while True:
            if not ended:
                buffer, ended = _fill(buffer, blocks, room)
            cut = _fitting(buffer, room)
            if doc.sections:  # the headings travel with the text: leave them room (those of a longer cut, more)
                cut = _fitting(buffer, max(0, room - _section_bytes(doc, done, cut)))
            last = ended and cut == len(buffer)
            message = msgspec.structs.replace(
                empty, text=buffer[:cut], part=part, last=last, first_position=position,
                sections=_part_sections(doc, done, cut),
            )
            result = await client.request(t.DOCUMENT_LOAD, message, IngestResult, timeout=timeout)
            del message
            if result.error is not None:
                raise DocumentRejected(part, result.error)
            if part == 0 and result.unchanged:
                return Sent(result.count, 1, unchanged=True)
            part += 1
            position += result.count
            if last:
                return Sent(position, part, seen=tuple(result.seen), superseded=result.superseded)
            if not 0 < result.resume_at <= cut:
                raise ValueError(f"document-load answered part {part - 1} with resume_at={result.resume_at}, "
                                 f"outside its {cut} characters")
            buffer = buffer[result.resume_at:]
            done += result.resume_at
            if on_part is not None:
                on_part(done, part)
    except DocumentRejected:
        raise
    except Exception as exc:
        if part > 0:  # parts of this version are staged: drop them again
            exc.add_note(await _discard(client, doc, timeout))
        raise
    finally:
        if isinstance(blocks, Generator):
            blocks.close()  # the file now, not whenever the generator is collected


def _part_sections(doc: DocumentSource, start: int, length: int) -> list[Section]:
    """The sections of the part of ``doc``'s text at ``[start, start + length)``, offsets made the part's own:
    the one it starts in, then each that begins inside it."""
    sections: list[Section] = []
    for s in doc.sections:
        if s.offset <= start:
            sections[:] = [Section(offset=0, heading=list(s.heading))]
        elif s.offset < start + length:
            sections.append(Section(offset=s.offset - start, heading=list(s.heading)))
        else:
            break
    return sections


def _section_bytes(doc: DocumentSource, start: int, length: int) -> int:
    """About how many bytes the part's sections take in its message (so its text leaves them room)."""
    sections = _part_sections(doc, start, length)
    return len(encode(sections)) if sections else 0


async def _discard(client: RequestClient, doc: DocumentSource, timeout: float) -> str:
    """Have the stores drop the parts of this load staged so far; an earlier version stays as it was."""
    request = DeleteDocument(document_id=doc.document_id, collection=doc.collection,
                             discard=parts_generation(doc.content_hash))
    try:
        result = await client.request(t.DOCUMENT_DELETE, request, IngestResult, timeout=timeout)
    except Exception as exc:
        return f"the parts already staged could not be discarded: {exc}"
    if result.error is not None:
        return f"the parts already staged could not be discarded: {result.error.type}: {result.error.message}"
    return "the parts already staged were discarded; any earlier version stays"


async def ingest(
    client: RequestClient,
    documents: Iterable[Document | DocumentSource],
    *,
    concurrency: int = 4,
    timeout: float | None = None,
    on_progress: Callable[[int, int, str], None] | None = None,
    failed: list[str] | None = None,
    on_stored: Callable[[DocumentSource], None] | None = None,
    summary: IngestSummary | None = None,
    describe: Callable[[BaseException], str] = str,
) -> IngestSummary:
    """Send each document to ``document-load`` (in parts when large) and wait for its chunk count.

    ``timeout`` bounds each part (None: the client settings' ``store_timeout_s``).
    ``on_progress(documents done, documents, label)`` is called after each document, and after
    each part of a document of several. ``on_stored`` is told of each
    document once every store holds it, so a caller can resume an interrupted run without sending
    those again. A caller that passes ``summary`` still has it when the run is cancelled: it lists
    the documents being sent then in ``interrupted``. ``describe`` words a document's failure.
    """
    sources = [d if isinstance(d, DocumentSource) else DocumentSource.of(d) for d in documents]
    wait = timeout if timeout is not None else ClientSettings().store_timeout_s
    if concurrency < 1:  # a semaphore of 0 would wait forever
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    summary = summary if summary is not None else IngestSummary()
    if failed is not None:
        summary.failed = failed
    started = time.perf_counter()
    slots = asyncio.Semaphore(concurrency)
    done = 0

    async def one(doc: DocumentSource) -> None:
        nonlocal done
        label = doc.title or doc.document_id

        def show_part(characters: int, parts: int) -> None:
            if on_progress is not None:
                percent = min(99, 100 * characters // max(doc.size, 1))
                on_progress(done, len(sources), f"{label} part {parts + 1} ({percent}%)")

        def show_page(page: Page) -> None:  # a PDF's or an image's pages, read here or by document-convert
            if on_progress is not None:
                on_progress(done, len(sources), page_label(label, page))

        async with slots:
            doc.on_page.append(show_page)
            try:
                sent = await send_document(client, doc, timeout=wait, on_part=show_part)
            except asyncio.CancelledError:
                summary.interrupted.append(doc)
                raise
            except Exception as exc:  # an error answer, a timeout, a transport failure: report, go on
                notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
                summary.failed.append(f"{doc.source or doc.document_id}: {describe(exc)}{notes}")
            else:
                if sent.unchanged:
                    summary.unchanged += 1
                else:
                    summary.documents += 1
                    summary.chunks += sent.chunks
                    summary.parts += sent.parts
                    summary.seen.extend(sent.seen)
                    if sent.superseded is not None:
                        summary.superseded.append(f"{doc.document_id}: {superseded_by(sent.superseded)}")
                if on_stored is not None:
                    on_stored(doc)
            finally:
                doc.on_page.remove(show_page)
            done += 1
            if on_progress is not None:
                on_progress(done, len(sources), label)

    await asyncio.gather(*(one(d) for d in sources))
    summary.seen = latest(summary.seen)  # a replica applies each partition in order: its latest says all
    summary.seconds = time.perf_counter() - started
    return summary
